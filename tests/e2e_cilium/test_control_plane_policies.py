"""The chart's own NetworkPolicies, proven with packets on Cilium's datapath.

The chart is rendered with the production values (deploy/values-production.yaml, once per
allocation mode: the DRA driver's policy comes with ``allocation.mode: dra``) and its
NetworkPolicies are applied in the release's namespace. The chart's components do not run
here (this sandbox runs them as processes: the chart is installed on the bridge network
only, docs/sandbox.md); in their place, one pod per Deployment and DaemonSet the chart
renders carries that workload's pod labels and declares its container ports, and busybox
``httpd`` listens on each (on 8080 where the workload declares none). Its HTTP probes are
kept, so that the pod goes Ready only if the kubelet's probes get through the policies.

Then pods of the cluster that play the peers the policies name connect to every one of
them (busybox ``nc``):

* the API's port: the Ingress's controller (ingress-nginx), the endpoints' (Traefik, for
  forwardAuth), Prometheus in ``monitoring`` and the chart's ``helm test`` pods pass; a pod
  labelled ``prometheus`` in another namespace, another pod of the release's namespace and a
  plain pod elsewhere are dropped;
* the device plugin's and the DRA driver's metrics ports: Prometheus alone passes;
* the controller and the fabric service: every peer is dropped;
* the scheduler extender: every pod of the cluster passes (kube-scheduler may run on the host
  network), but a tenant's container is dropped by its tenancy's own egress policy.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from devtools import waiting
from devtools.sandbox import runner
from gpucaas.chart import NAMESPACE, component, is_hook, pod_spec, production_values, render
from tests.e2e.conftest import TIMEOUT, UNTIL_CANCELLED, Tenant, new_tenant
from tests.e2e_cilium.probes import (
    Container,
    answered,
    dropped,
    get,
    kubectl,
    kubectl_command,
    policy_drops,
    start_container,
)

IMAGE = "docker.io/library/busybox:1.36"
ANSWER = "a stand-in of a gpucaas component"
#: where a stand-in listens when its workload declares no port (the policies admit none there)
UNDECLARED_PORT = 8080
ELSEWHERE = "gpucaas-e2e-elsewhere"
#: the peers' namespaces beside the release's (production values name them)
PEER_NAMESPACES = ("ingress-nginx", "traefik", "monitoring", ELSEWHERE)


@dataclass
class Pod:
    """A pod of the cluster's own (not a tenant's), reached with ``kubectl exec``."""

    sandbox: runner.Sandbox
    namespace: str
    pod: str

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}"

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*kubectl_command(self.sandbox), "-n", self.namespace, "exec", self.pod, "--", "sh", "-c", command],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )


@dataclass
class Rendered:
    """What the production values render, over both allocation modes."""

    policies: list[dict[str, Any]]
    workloads: list[dict[str, Any]]  # the Deployments and DaemonSets
    helm_test_labels: dict[str, str]  # the pod labels of the chart's `helm test` pods


def _rendered() -> Rendered:
    policies: dict[str, dict[str, Any]] = {}
    kept: dict[str, dict[str, Any]] = {}
    helm_test: dict[str, str] = {}
    for mode in ("device-plugin", "dra"):
        values = production_values()
        values.setdefault("allocation", {})["mode"] = mode
        for obj in render(values):
            if obj["kind"] == "NetworkPolicy":
                policies[obj["metadata"]["name"]] = obj
            elif obj["kind"] in ("Deployment", "DaemonSet") and not is_hook(obj):
                kept[obj["metadata"]["name"]] = obj
            elif obj["kind"] == "Pod" and component(obj) == "helm-test":
                helm_test = dict(obj["metadata"]["labels"])
    assert helm_test, "the chart renders no helm test pod"
    return Rendered(list(policies.values()), list(kept.values()), helm_test)


def _http_probe(probe: dict[str, Any] | None) -> dict[str, Any] | None:
    """An HTTP probe as busybox ``httpd`` answers it (plain HTTP); other kinds left out."""
    if not probe or "httpGet" not in probe:
        return None
    return {**probe, "httpGet": {**probe["httpGet"], "scheme": "HTTP"}}


def stand_in(workload: dict[str, Any], node: str) -> tuple[dict[str, Any], list[int]]:
    """A pod in the workload's place: its pod labels, its declared ports (busybox ``httpd`` on
    each, answering every path its probes ask), its HTTP probes; and the ports it listens on."""
    (container,) = pod_spec(workload)["containers"]
    ports = [dict(p) for p in container.get("ports", [])]
    numbers = [int(p["containerPort"]) for p in ports] or [UNDECLARED_PORT]
    probes = {
        key: probe
        for key in ("readinessProbe", "livenessProbe", "startupProbe")
        if (probe := _http_probe(container.get(key)))
    }
    paths = {probe["httpGet"]["path"].strip("/") for probe in probes.values()}
    script = " && ".join(
        [
            "mkdir -p /tmp/www",
            f"echo '{ANSWER}' > /tmp/www/index.html",
            *(f"echo ok > /tmp/www/{path}" for path in sorted(paths)),
            *(f"httpd -p {n} -h /tmp/www" for n in numbers),
            "exec sleep 86400",
        ]
    )
    labels = dict(workload["spec"]["template"]["metadata"]["labels"])
    box = {"name": container["name"], "command": ["sh", "-c", script], "ports": ports, **probes}
    return busybox_pod(f"stand-in-{component(workload)}", NAMESPACE, labels, node, box), numbers


def peer(name: str, namespace: str, labels: dict[str, str], node: str) -> dict[str, Any]:
    return busybox_pod(name, namespace, labels, node, {"name": "peer", "command": UNTIL_CANCELLED})


def busybox_pod(
    name: str, namespace: str, labels: dict[str, str], node: str, container: dict[str, Any]
) -> dict[str, Any]:
    """A pod of ``container`` on busybox, placed on ``node`` whatever its taints."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{**container, "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }


@dataclass
class Target:
    component: str
    ip: str
    ports: list[int]


@dataclass
class ControlPlane:
    targets: dict[str, Target]
    peers: dict[str, Pod]


def _ready(sandbox: runner.Sandbox, namespace: str, name: str) -> dict[str, Any] | None:
    pod = json.loads(kubectl(sandbox, "-n", namespace, "get", "pod", name, "-o", "json"))
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod if conditions.get("Ready") == "True" else None


@pytest.fixture(scope="module")
def control_plane(sandbox: runner.Sandbox) -> Iterator[ControlPlane]:
    rendered = _rendered()
    policies, kept, helm_test = rendered.policies, rendered.workloads, rendered.helm_test_labels
    nodes = sorted(sandbox.real_nodes)
    peers = {
        # name: (namespace, labels)
        "ingress-nginx": ("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}),
        "traefik": ("traefik", {"app.kubernetes.io/name": "traefik"}),
        "prometheus": ("monitoring", {"app.kubernetes.io/name": "prometheus"}),
        "helm-test": (NAMESPACE, helm_test),
        "prometheus-elsewhere": (ELSEWHERE, {"app.kubernetes.io/name": "prometheus"}),
        "release-neighbour": (NAMESPACE, {"app.kubernetes.io/name": "neighbour"}),
        "elsewhere": (ELSEWHERE, {}),
    }
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in (NAMESPACE, *PEER_NAMESPACES)
    ]
    objects += policies
    listening: dict[str, list[int]] = {}
    for i, workload in enumerate(kept):
        pod, ports = stand_in(workload, nodes[i % len(nodes)])
        objects.append(pod)
        listening[component(workload)] = ports
    for i, (name, (namespace, labels)) in enumerate(peers.items()):
        objects.append(peer(f"peer-{name}", namespace, labels, nodes[i % len(nodes)]))
    kubectl(sandbox, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    try:
        targets = {}
        for name, ports in listening.items():
            pod = waiting.wait_for(
                partial(_ready, sandbox, NAMESPACE, f"stand-in-{name}"),
                TIMEOUT,
                interval=1,
                what=f"the {name} stand-in Ready (its probes through the policies)",
            )
            targets[name] = Target(name, pod["status"]["podIP"], ports)
        pods = {}
        for name, (namespace, _) in peers.items():
            waiting.wait_for(
                partial(_ready, sandbox, namespace, f"peer-{name}"),
                TIMEOUT,
                interval=1,
                what=f"peer {name} Running",
            )
            pods[name] = Pod(sandbox, namespace, f"peer-{name}")
        yield ControlPlane(targets, pods)
    finally:
        kubectl(sandbox, "delete", "namespace", *PEER_NAMESPACES, "--wait=false")
        mine = [f"pod/{o['metadata']['name']}" for o in objects if o["kind"] == "Pod"]
        mine += [f"networkpolicy/{p['metadata']['name']}" for p in policies]
        kubectl(sandbox, "-n", NAMESPACE, "delete", *mine, "--wait=false", "--ignore-not-found")


#: who reaches what (every other pair is dropped); the scheduler extender is open to every pod
ADMITTED = {
    "api": {"ingress-nginx", "traefik", "prometheus", "helm-test"},
    "device-plugin": {"prometheus"},
    "dra-driver": {"prometheus"},
    "controller": set(),
    "fabric": set(),
}
OPEN = {"scheduler-extender"}


def test_every_workload_of_the_chart_has_a_policy_and_its_stand_in_went_ready(control_plane: ControlPlane) -> None:
    assert set(control_plane.targets) == set(ADMITTED) | OPEN


def test_each_port_admits_exactly_the_peers_the_values_name(
    sandbox: runner.Sandbox, control_plane: ControlPlane
) -> None:
    probes = [
        (name, target, port, source)
        for name, target in control_plane.targets.items()
        for port in target.ports
        for source in control_plane.peers
    ]
    before = policy_drops(sandbox)
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(lambda p: get(control_plane.peers[p[3]], p[1].ip, p[2]), probes))
    wrong = []
    for (name, _, port, source), (code, out) in zip(probes, outcomes, strict=True):
        admitted = name in OPEN or source in ADMITTED[name]
        if admitted and not (code == 0 and answered(out, ANSWER)):
            wrong.append(f"{source} -> {name}:{port}: expected an answer, got {code}: {out.strip()[:200]}")
        if not admitted and not dropped(code, out):
            wrong.append(f"{source} -> {name}:{port}: expected a drop, got {code}: {out.strip()[:200]}")
    assert not wrong, "\n".join(wrong)
    denied = sum(1 for name, _, _, source in probes if name not in OPEN and source not in ADMITTED[name])
    assert denied >= 20
    assert policy_drops(sandbox) > before


@pytest.fixture(scope="module")
def tenant_container(sandbox: runner.Sandbox, admin: Tenant) -> Iterator[Container]:
    container = start_container(sandbox, new_tenant(admin, "acme", 4), *UNTIL_CANCELLED)
    yield container
    status, body = container.tenant.call("DELETE", f"/v1/containers/{container.cid}")
    assert status in (200, 202), body


def test_a_tenants_container_reaches_no_component(
    sandbox: runner.Sandbox, control_plane: ControlPlane, tenant_container: Container
) -> None:
    probes = [(name, target.ip, port) for name, target in control_plane.targets.items() for port in target.ports]
    before = policy_drops(sandbox)
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(lambda p: get(tenant_container, p[1], p[2]), probes))
    reached = [
        f"{name}:{port}: {code}: {out.strip()[:200]}"
        for (name, _, port), (code, out) in zip(probes, outcomes, strict=True)
        if not dropped(code, out)
    ]
    assert not reached, "from a tenant's container:\n" + "\n".join(reached)
    assert policy_drops(sandbox) > before
