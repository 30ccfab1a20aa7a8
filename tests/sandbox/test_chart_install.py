"""docs/deploy.md's install steps, read from the page and run in order with bash on a sandbox's
cluster that has no product yet (`gpucaas sandbox --install none`: the cluster, its nodes, the
registry with the image pushed), install a working gpucaas: `helm test` passes, the admin token
the page's step reads is the API's, a tenant's 2-GPU container runs to completion, queued by
Kueue; and the sandbox opened on it is `make sandbox`'s (`--install helm` runs the same steps):
its files and banner, the nodes' GPUs, pods and this machine reaching Services by name
(kube-proxy and the cluster DNS), the admin's caasctl.

Needs root, the pinned Helm (`make helm`), `make image`'s tools and the host's PostgreSQL
(`make postgres`); run through /work/heavy (it starts a cluster and two real nodes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from rich.console import Console

from core import kueue
from core.kube import new_api_client
from devtools.local_cluster.binaries import bin_dir
from devtools.ports import free_port
from devtools.real_node.images import BUSYBOX_IMAGE
from devtools.sandbox import chart_install, deploy_steps, host_database, product, runner, tenant_view
from devtools.sandbox.service_network import DNS_IP
from devtools.sandbox.tenant_view import DEMO_TENANCY
from devtools.waiting import wait_for
from tests.fixtures.sandbox import as_json, caasctl, workload_of

# CI (root, `make install` builds Helm, `make test` starts PostgreSQL) never skips it
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI")
    and (
        os.geteuid() != 0
        or not (bin_dir() / "helm").exists()
        or shutil.which("psql") is None
        or subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"], check=False).returncode != 0
    ),
    reason="needs root, make helm and make postgres",
)

#: the chart's `helm test` pods
TEST_PODS = ("gpucaas-test-api", "gpucaas-test-controller")
SANDBOX_FILES = ("kubeconfig", "admin-token", "tenant-token", "tls/ca.pem", "caasctl.yaml", "registry.json")


# The DRA mode installs the same way (`gpucaas sandbox --install helm --allocation dra`; this
# module with params ["dra"] passes alone and after the device-plugin run), but once, in make
# test's loaded rest stage, its tenant container was bound and did not finish in 180 s: it
# joins make test once that is understood (docs/sandbox.md).
@pytest.fixture(scope="module", params=["device-plugin"])
def installed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[runner.Sandbox, dict[str, str]]]:
    """A sandbox without the product, queued by Kueue as `make sandbox` runs it; docs/deploy.md's
    steps run on it with its settings (each step's output kept, by name); then opened."""
    state = tmp_path_factory.mktemp("sandbox")
    started = runner.start(state, api_port=free_port(), install="none", allocation_mode=request.param, queueing="kueue")
    try:
        with new_api_client(started.kubeconfig) as api:
            namespaces = {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
        assert chart_install.NAMESPACE not in namespaces and not chart_install.release_deployed(started.kubeconfig)
        settings = state / "helm" / chart_install.DEPLOY_SETTINGS
        outputs = {
            step.name: deploy_steps.run_step(step, settings, started.kubeconfig, bin_dir())
            for step in deploy_steps.steps()
        }
        runner.open_installed(started)
        yield started, outputs
    finally:
        started.stop()
        host_database.drop(state)


@pytest.fixture(scope="module")
def sandbox(installed: tuple[runner.Sandbox, dict[str, str]]) -> runner.Sandbox:
    return installed[0]


@pytest.fixture(scope="module")
def step_outputs(installed: tuple[runner.Sandbox, dict[str, str]]) -> dict[str, str]:
    """docs/deploy.md's steps' standard outputs, by the step's name."""
    return installed[1]


def node_daemon(sandbox: runner.Sandbox) -> str:
    """The DaemonSet that hands out the GPUs in the sandbox's allocation mode."""
    return "gpucaas-dra-driver" if sandbox.allocation_mode == "dra" else "gpucaas-device-plugin"


def test_the_release_is_deployed_and_its_workloads_ready_from_the_pushed_image(sandbox: runner.Sandbox) -> None:
    status = chart_install.release_status(sandbox.kubeconfig)
    assert status["info"]["status"] == "deployed"
    run_values = (sandbox.state_dir / "helm" / "values-run.yaml").read_text()
    with new_api_client(sandbox.kubeconfig) as api:
        apps = client.AppsV1Api(api)
        deployments = apps.list_namespaced_deployment(chart_install.NAMESPACE).items
        daemonsets = apps.list_namespaced_daemon_set(chart_install.NAMESPACE).items
        pods = client.CoreV1Api(api).list_namespaced_pod(chart_install.NAMESPACE).items
    assert {d.metadata.name: d.status.ready_replicas for d in deployments} == {
        "gpucaas-api": 1,
        "gpucaas-controller": 1,
        "gpucaas-scheduler-extender": 1,
    }
    assert {d.metadata.name: (d.status.number_ready, d.status.desired_number_scheduled) for d in daemonsets} == {
        node_daemon(sandbox): (2, 2),
        "gpucaas-fabric": (2, 2),
    }
    images = {c.image for p in pods for c in p.spec.containers}
    assert len(images) == 1
    (image,) = images
    assert image.startswith("ghcr.io/gpucaas/gpucaas@sha256:") and image.split("@")[1] in run_values


def test_the_sandbox_files_are_written_and_the_banner_names_the_release(sandbox: runner.Sandbox) -> None:
    for name in (*SANDBOX_FILES, "ingress.json"):
        assert (sandbox.state_dir / name).stat().st_size > 0, name
    console = Console(record=True, width=300)
    tenant_view.print_banner(console, sandbox)
    banner = console.export_text()
    assert "gpucaas sandbox is running" in banner
    assert "installed with the chart: release gpucaas in gpucaas-system, image ghcr.io/gpucaas/gpucaas:" in banner


def test_a_tenant_runs_a_two_gpu_container_through_the_installed_api(sandbox: runner.Sandbox) -> None:
    done = subprocess.run(tenant_view.tenant_curl(sandbox), capture_output=True, text=True, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    cid = json.loads(done.stdout)["id"]
    token = sandbox.tenant_token
    seen: dict[str, Any] = {}

    def finished() -> dict[str, Any] | None:
        seen.update(sandbox.api("GET", f"/v1/containers/{cid}", token=token))
        return dict(seen) if seen["status"] in ("Succeeded", "Failed") else None

    try:
        final = wait_for(finished, 180, interval=1, what=f"container {cid} finished")
    except TimeoutError:
        events = sandbox.api("GET", f"/v1/containers/{cid}/events", token=token)
        raise AssertionError(f"container {cid} did not finish: {seen}; its events: {events}") from None
    assert final["status"] == "Succeeded" and final["exit_code"] == 0, final
    # the installed controller made the tenancy's queue, and Kueue admitted the pod through it
    with new_api_client(sandbox.kubeconfig) as api:
        pod = client.CoreV1Api(api).read_namespaced_pod(final["pod_name"], final["namespace"])
        workload = workload_of(client.CustomObjectsApi(api), pod)
    assert pod.metadata.labels[kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    assert workload is not None and workload["status"]["admission"]["clusterQueue"] == kueue.cluster_queue_name(
        DEMO_TENANCY
    )


def test_kube_scheduler_reaches_the_extender_at_its_service_address(sandbox: runner.Sandbox) -> None:
    """As on a kubeadm control plane: kube-scheduler on this machine calls the extender's fixed
    ClusterIP (deploy/scheduler's configuration as shipped, the address moved to the sandbox's
    Service range), and kube-proxy carries it to the pod."""
    assert sandbox.service_range is not None
    (extender,) = product.shipped_scheduler_config(sandbox.allocation_mode)["extenders"]
    shipped = urllib.parse.urlsplit(extender["urlPrefix"])
    assert shipped.hostname is not None
    assert sandbox.extender_url == f"http://{sandbox.service_range.moved(shipped.hostname)}:{shipped.port}"
    with urllib.request.urlopen(f"{sandbox.extender_url}/v1/nodes", timeout=10) as resp:
        seen = {n["node"] for n in json.load(resp)["nodes"]}
    assert seen == {node.name for node in sandbox.nodes}


def test_the_nodes_offer_their_gpus_in_the_allocation_mode(sandbox: runner.Sandbox) -> None:
    """The device plugin's 8 GPUs in each node's allocatable, or the DRA driver's ResourceSlices
    and the 8 GPUs it advertises in each node's capacity (what pods queued by Kueue request)."""

    def offers() -> tuple[dict[str, Any], set[str]]:
        with new_api_client(sandbox.kubeconfig) as api:
            nodes = client.CoreV1Api(api).list_node().items
            slices: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices"
            )
        offered = {n.metadata.name: n.status.allocatable.get("nvidia.com/gpu") for n in nodes}
        return offered, {s["spec"]["nodeName"] for s in slices["items"] if s["spec"].get("nodeName")}

    # a GPU just used is offered again once its lease's post-run check has passed
    sliced = {"gpu-node-a", "gpu-node-b"} if sandbox.allocation_mode == "dra" else set()
    wanted = ({"gpu-node-a": "8", "gpu-node-b": "8"}, sliced)
    seen: list[Any] = []
    ok = wait_for(lambda: seen.append(offers()) or seen[-1] == wanted, 120, interval=1, what="8 GPUs per node")
    assert ok, seen[-1]


def test_helm_test_passes(sandbox: runner.Sandbox, step_outputs: dict[str, str]) -> None:
    """docs/deploy.md's `helm test` step, the chart's own checks: a pod resolves the API's Service
    by its DNS name (the cluster DNS) and reaches it over HTTPS (kube-proxy), and a pod reads the
    controller's Deployment through the ``kubernetes`` Service (kube-apiserver, forwarded from the
    node bridges); their logs say so (the pods stay until the next `helm test`)."""
    out = step_outputs["check"]
    assert len(re.findall(r"^Phase:\s+Succeeded$", out, re.MULTILINE)) == 2, out
    with new_api_client(sandbox.kubeconfig) as api:
        core = client.CoreV1Api(api)
        logs = {name: core.read_namespaced_pod_log(name, chart_install.NAMESPACE) for name in TEST_PODS}
    assert "https://gpucaas-api.gpucaas-system.svc:443/readyz answered 200" in logs["gpucaas-test-api"], logs
    assert "deployment gpucaas-system/gpucaas-controller: 1 of 1 replicas Ready" in logs["gpucaas-test-controller"]


def test_the_admin_token_the_pages_step_reads_is_the_apis(
    sandbox: runner.Sandbox, step_outputs: dict[str, str]
) -> None:
    """The token docs/deploy.md's step prints (the Secret the API's admin token comes from)
    lists the tenancies; one that is not it is refused."""
    token = step_outputs["admin-token"].strip()
    assert token
    tenancies = sandbox.api("GET", "/v1/admin/tenancies", token=token)
    assert DEMO_TENANCY in {t["name"] for t in tenancies["data"]}
    with pytest.raises(urllib.error.HTTPError) as refused:
        sandbox.api("GET", "/v1/admin/tenancies", token=token + "x")
    assert refused.value.code == 401


def test_a_pod_and_this_machine_resolve_a_service_and_reach_its_pods(sandbox: runner.Sandbox) -> None:
    """A plain pod resolves the extender's Service by its short name (the kubelet's search path)
    and reaches its pod through its ClusterIP; this machine asks the cluster DNS at its Service
    address and reaches the same ClusterIP (kube-proxy's rules serve the host too)."""
    extender = "gpucaas-scheduler-extender"
    name = "service-check"
    fetch = f"wget -q -O- http://{extender}.{chart_install.NAMESPACE}:8888/healthz"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "check", "image": BUSYBOX_IMAGE, "command": ["sh", "-c", f"{fetch} && echo ok"]}],
        },
    }
    with new_api_client(sandbox.kubeconfig) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod)
        try:
            ended = wait_for(
                lambda: (p := core.read_namespaced_pod(name, "default")).status.phase in ("Succeeded", "Failed") and p,
                120,
                interval=1,
                what=f"pod {name} ended",
            )
            logs = core.read_namespaced_pod_log(name, "default")
            cluster_ip = core.read_namespaced_service(extender, chart_install.NAMESPACE).spec.cluster_ip
        finally:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert ended.status.phase == "Succeeded" and logs.strip().endswith("ok"), (ended.status, logs)
    fqdn = f"{extender}.{chart_install.NAMESPACE}.svc.cluster.local"
    answer = subprocess.run(
        ["/bin/busybox", "nslookup", fqdn, sandbox.service_range.moved(DNS_IP)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert f"Address: {cluster_ip}" in answer, answer
    with urllib.request.urlopen(f"http://{cluster_ip}:8888/healthz", timeout=10) as response:
        assert response.status == 200


def test_the_admins_caasctl_reaches_each_nodes_fabric_service(sandbox: runner.Sandbox) -> None:
    """The sandbox's caasctl.yaml names each node's fabric socket where the chart's fabric pod
    serves it (``/run/gpucaas`` in the node's mount namespace), as the banner's
    ``caasctl partitions list --node gpu-node-a`` uses it."""
    parts = as_json(caasctl(sandbox, "partitions", "list", "--node", "gpu-node-a", "-o", "json"))
    assert sorted(p["id"] for p in parts) == list(range(15))
