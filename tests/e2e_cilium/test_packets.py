"""Tenant isolation proven with packets: real traffic from a tenancy's container, on nodes whose
network is Cilium, enforcing the policies the tenancy controller and the API made.

From a container of tenancy ``acme`` (``caasctl exec`` running busybox ``nc``, as a tenant would):

* to another acme container: passes (the page comes back);
* to a container of tenancy ``other``: dropped (and the other way round); that container
  answers its own tenancy, so the path exists and only the policy stops it;
* to the nodes (their kubelets listen on the node addresses): dropped;
* to a metadata service at 169.254.169.254 (a listener in a network namespace of its own on the
  nodes' uplink, routed from the nodes as a cloud's is): dropped; the node itself reaches it;
* through the ingress controller to acme's declared port: passes.

"Dropped" is a connection that times out (no refusal comes back), and Cilium's own counters
of policy drops grow. The sandbox runs no cluster DNS, so the policy's DNS rule is not probed.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from devtools import waiting
from devtools.real_node import cilium
from devtools.sandbox import runner
from tests.e2e.conftest import TIMEOUT, UNTIL_CANCELLED, Tenant, new_tenant
from tests.e2e.test_endpoints import fetch
from tests.e2e_cilium.probes import (
    PAGE,
    PROBE_SECONDS,
    SERVE,
    Container,
    assert_dropped,
    kubectl,
    policy_drops,
    served,
    start_container,
)

METADATA = "169.254.169.254"
#: the metadata service's own address on the uplink (the nodes' route to 169.254.169.254)
METADATA_UPLINK = str(cilium.UPLINK_NETWORK[5])


@pytest.fixture(scope="module")
def acme(admin: Tenant) -> Tenant:
    return new_tenant(admin, "acme", 4)


@pytest.fixture(scope="module")
def other(admin: Tenant) -> Tenant:
    return new_tenant(admin, "other", 4)


@pytest.fixture(scope="module")
def containers(sandbox: runner.Sandbox, acme: Tenant, other: Tenant) -> dict[str, Container]:
    return {
        "acme-server": start_container(sandbox, acme, "sh", "-c", SERVE, port=True),
        "acme-client": start_container(sandbox, acme, *UNTIL_CANCELLED),
        "other-server": start_container(sandbox, other, "sh", "-c", SERVE),
        "other-client": start_container(sandbox, other, *UNTIL_CANCELLED),
    }


@pytest.fixture(scope="module")
def metadata_service(sandbox: runner.Sandbox) -> Iterator[str]:
    """An HTTP listener at 169.254.169.254 in a namespace of its own on the uplink, and each
    node's route to it (this machine's own route to the address is left alone)."""
    ns, veth = "gpucaas-imds", "gcimds"

    def ip(*args: str, check: bool = True) -> None:
        subprocess.run(["ip", *args], capture_output=True, check=check)

    ip("netns", "del", ns, check=False)
    ip("netns", "add", ns)
    server: subprocess.Popen[bytes] | None = None
    try:
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", cilium.UPLINK, "up")
        prefix = cilium.UPLINK_NETWORK.prefixlen
        for args in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{METADATA_UPLINK}/{prefix}", "dev", "eth0"),
            ("addr", "add", f"{METADATA}/32", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("route", "add", str(ipaddress.ip_network(cilium.POD_NETWORK)), "via", cilium.HOST_ADDRESS),
        ):
            ip("-n", ns, *args)
        for node in sandbox.real_nodes.values():
            assert node.network is not None
            ip("-n", node.network.namespace, "route", "replace", f"{METADATA}/32", "via", METADATA_UPLINK)
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", "-m", "http.server", "--bind", METADATA, "80"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://{METADATA}/"
        listening = ["ip", "netns", "exec", ns, "curl", "-sf", "-o", "/dev/null", "--max-time", "2", url]
        waiting.wait_for(
            lambda: subprocess.run(listening, capture_output=True, check=False).returncode == 0,
            60,
            interval=0.2,
            what="the metadata listener",
        )
        yield url
    finally:
        if server is not None:
            server.kill()
            server.wait()
        for node in sandbox.real_nodes.values():
            if node.network is not None:
                ip("-n", node.network.namespace, "route", "del", f"{METADATA}/32", check=False)
        ip("netns", "del", ns, check=False)
        ip("link", "del", veth, check=False)


def test_the_nodes_run_cilium_and_the_tenancies_have_their_policies(sandbox: runner.Sandbox, acme: Tenant) -> None:
    assert sandbox.network == "cilium" and len(sandbox.real_nodes) == 2
    for node in sandbox.real_nodes.values():
        assert cilium.agent_ready(node.cluster.bin_dir, node.folder)
    valid = json.loads(kubectl(sandbox, "get", "ciliumnetworkpolicies", "-n", "tenant-acme", "-o", "json"))
    names = {p["metadata"]["name"] for p in valid["items"]}
    assert "tenant-isolation" in names


def test_a_container_reaches_its_own_tenancy(containers: dict[str, Container]) -> None:
    # about three one-GPU pods fit a node of this 2-core machine by their CPU requests: the four
    # span both nodes, so some of the paths below cross the uplink between the nodes
    assert len({c.node for c in containers.values()}) == 2, {k: c.node for k, c in containers.items()}
    client, server = containers["acme-client"], containers["acme-server"]
    # the endpoints' policies are computed as the pods start: the first answer may take a moment
    waiting.wait_for(lambda: served(client, server.ip), TIMEOUT, interval=1, what="acme's client reaching its server")
    mine = containers["other-client"], containers["other-server"]
    waiting.wait_for(
        lambda: served(mine[0], mine[1].ip), TIMEOUT, interval=1, what="other's client reaching its server"
    )


def test_another_tenancys_pods_are_dropped_both_ways(sandbox: runner.Sandbox, containers: dict[str, Container]) -> None:
    before = policy_drops(sandbox)
    assert_dropped(containers["acme-client"], containers["other-server"].ip)
    assert_dropped(containers["other-client"], containers["acme-server"].ip)
    # both servers still answer their own tenancy: the path exists, the policy dropped the rest
    for tenancy in ("acme", "other"):
        client, server = containers[f"{tenancy}-client"], containers[f"{tenancy}-server"]
        assert served(client, server.ip)
    assert policy_drops(sandbox) > before


def test_the_nodes_are_dropped(sandbox: runner.Sandbox, containers: dict[str, Container]) -> None:
    client = containers["acme-client"]
    before = policy_drops(sandbox)
    for node in sandbox.real_nodes.values():
        url = f"https://{node.node_ip}:{node.kubelet_port}/healthz"
        # the kubelet listens there: this machine is answered (401 without credentials)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10, context=_insecure())
        assert refused.value.code == 401
        assert_dropped(client, node.node_ip, node.kubelet_port)
    assert policy_drops(sandbox) > before


def test_the_metadata_address_is_dropped(
    sandbox: runner.Sandbox, containers: dict[str, Container], metadata_service: str
) -> None:
    client = containers["acme-client"]
    node = sandbox.real_nodes[client.node]
    assert node.network is not None
    # the node itself reaches the listener: the route is there, only the pod's policy stops it
    reached = subprocess.run(
        ["ip", "netns", "exec", node.network.namespace, "curl", "-sS", "--max-time", "10", metadata_service],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert reached.returncode == 0, reached.stderr
    before = policy_drops(sandbox)
    assert_dropped(client, METADATA, 80)
    assert policy_drops(sandbox) > before


def test_the_ingress_controller_reaches_a_declared_port(
    sandbox: runner.Sandbox, containers: dict[str, Container], acme: Tenant
) -> None:
    server = containers["acme-server"]
    status, body = acme.call("GET", f"/v1/containers/{server.cid}")
    assert status == 200, body
    (url,) = (e["url"] for e in body["endpoints"] if e["port"] == 8080)

    def served() -> tuple[int, str] | None:
        answer = fetch(sandbox, url + "/", acme.token)
        return answer if answer[0] == 200 else None

    code, page = waiting.wait_for(served, TIMEOUT, interval=1, what="acme's endpoint served through the ingress")
    assert page.strip() == PAGE
    # the other tenancy's server declared no port: the ingress controller's address is not admitted there
    other = containers["other-server"]
    reached = subprocess.run(
        ["curl", "-sS", "--max-time", str(PROBE_SECONDS), f"http://{other.ip}:8080/"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert reached.returncode == 28, (reached.returncode, reached.stdout, reached.stderr)  # 28: timed out


def _insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
