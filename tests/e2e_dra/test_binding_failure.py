"""Binding conditions in the DRA mode: a partition that cannot be activated is never bound to.

A foreign holder keeps one GPU of gpu-node-a active through the fabric service, so the
8-GPU partition of gpu-node-a cannot be activated. With gpu-node-b cordoned, kube-scheduler
allocates it there anyway: the driver reports ``gpucaas.dev/partition-failed``, the
scheduler deallocates the claim, and once gpu-node-b takes pods again the pod runs there.
The failed claim leaves no partition active.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable

from kubernetes import client

from gpucaas.core import dra
from gpucaas.core.fabric_client import FabricClient
from gpucaas.devtools.waiting import wait_for
from gpucaas.programs.sandbox import runner
from gpucaas.programs.sandbox.dra_demo import dra_pod, ensure_namespace
from tests.e2e.conftest import activations, published_partitions
from tests.e2e_dra.conftest import pci_of

NS = "e2e-dra-binding"
BLOCKER = "e2e:blocker"
UNSCORED_TEMPLATE = "unscored-gpus-8"


def _cordon(core: client.CoreV1Api, node: str, cordoned: bool) -> None:
    core.patch_node(node, {"spec": {"unschedulable": cordoned}})


def _eight_gpus_beside_a_blocker(sandbox: runner.Sandbox, k8s: client.ApiClient, template: str, pod_name: str,
                                 before_pod: Callable[[], bool] | None = None, cordon_b_until_failed: bool = False,
                                 ) -> tuple[client.V1Pod, list[tuple[str, str]]]:
    """Block one GPU of gpu-node-a through its fabric service, (wait for ``before_pod``,) run
    an 8-GPU pod whose claim comes from ``template`` (with ``cordon_b_until_failed``, with
    gpu-node-b cordoned until gpu-node-a's activation has failed); (the finished pod, the
    (node, condition) pairs its claims showed)."""
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    node_a = next(n for n in sandbox.nodes if n.name == "gpu-node-a")

    def node_a_whole_board_offered() -> bool:
        """gpu-node-a's 8-GPU partition is published and no claim holds anything there (the
        tests before this one leave GPUs being checked for a while)."""
        slices = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                   field_selector="spec.nodeName=gpu-node-a")["items"]
        devices = {d["name"] for s in slices for d in s["spec"].get("devices") or []}
        claims = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")["items"]
        held = [r for c in claims for r in ((((c.get("status") or {}).get("allocation") or {})
                                             .get("devices") or {}).get("results") or [])
                if r["pool"] == "gpu-node-a"]
        return "nvlink-8gpu-p0" in devices and not held

    # first fit must meet gpu-node-a's whole board first, so that its activation is the one to fail
    wait_for(node_a_whole_board_offered, timeout=180, what="gpu-node-a's 8-GPU partition offered")
    with FabricClient(node_a.fabric_socket, timeout=10) as fc:
        pci = pci_of(sandbox, "gpu-node-a")
        fc.activate(BLOCKER, [pci[min(pci)]])
    if before_pod is not None:
        wait_for(before_pod, timeout=180, what="the blocker seen")
    seen: list[tuple[str, str]] = []  # (node of the allocation, condition type)
    stop = threading.Event()

    def watch_claims() -> None:
        while not stop.is_set():
            for c in custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"]:
                for d in (c.get("status") or {}).get("devices") or []:
                    for cond in d.get("conditions") or []:
                        if cond.get("status") == "True" and (d["pool"], cond["type"]) not in seen:
                            seen.append((d["pool"], cond["type"]))
            stop.wait(0.1)

    watcher = threading.Thread(target=watch_claims, daemon=True)
    watcher.start()
    try:
        pod = dra_pod(pod_name, 8, seconds=2)
        pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
        if cordon_b_until_failed:
            _cordon(core, "gpu-node-b", True)
        core.create_namespaced_pod(NS, pod)
        if cordon_b_until_failed:
            wait_for(lambda: ("gpu-node-a", dra.BINDING_FAILURE_CONDITION) in seen, timeout=180,
                     what="gpu-node-a's activation to fail")
            _cordon(core, "gpu-node-b", False)
        wait_for(lambda: core.read_namespaced_pod(pod_name, NS).status.phase in ("Succeeded", "Failed"),
                 timeout=240, what="the 8-GPU pod to finish")
    finally:
        _cordon(core, "gpu-node-b", False)
        stop.set()
        watcher.join(timeout=10)
        with FabricClient(node_a.fabric_socket, timeout=10) as fc:
            fc.release(BLOCKER)
    # nothing stays active for a claim that failed on gpu-node-a, nor for the one that ran
    wait_for(lambda: not [a for acts in activations(sandbox).values() for a in acts
                          if a["holder"].startswith("claim:")], timeout=60, what="no partition held by a claim")
    return core.read_namespaced_pod(pod_name, NS), seen


def test_a_failed_activation_deallocates_and_the_pod_runs_elsewhere(dra_sandbox: runner.Sandbox,
                                                                   k8s: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=())
    # The claim comes from a template of the same request under a name that is not one of
    # gpucaas' own (gpucaas-gpus-N): the extender gives such a pod no preference; gpu-node-b
    # cordoned, kube-scheduler meets gpu-node-a, as it would had the blocker appeared after
    # the extender scored the nodes.
    template = dra.claim_template(8, NS)
    template["metadata"]["name"] = UNSCORED_TEMPLATE
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaimtemplates", template)
    pod, seen = _eight_gpus_beside_a_blocker(dra_sandbox, k8s, UNSCORED_TEMPLATE, "eight", cordon_b_until_failed=True)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == "gpu-node-b"
    assert ("gpu-node-a", dra.BINDING_FAILURE_CONDITION) in seen, seen
    assert ("gpu-node-b", dra.BINDING_CONDITION) in seen, seen
    assert ("gpu-node-a", dra.BINDING_CONDITION) not in seen, seen


def test_the_extender_sends_a_gpucaas_claim_past_the_blocked_board(dra_sandbox: runner.Sandbox,
                                                                   k8s: client.ApiClient) -> None:
    """With gpucaas' own template the prioritize-only extender, which sees the blocker's
    partition in gpu-node-a's FabricState, scores gpu-node-b best: no failed activation."""
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(8,))

    def extender_sees_the_blocker() -> bool:
        """The extender's own view (GET /v1/nodes): gpu-node-a no longer has 8 GPUs free, and
        gpu-node-b (whose GPUs the previous test's pod used) has all 8 back, also in the DRA
        driver's slice (the two are published apart)."""
        assert dra_sandbox.extender_url is not None
        with urllib.request.urlopen(f"{dra_sandbox.extender_url}/v1/nodes", timeout=10) as resp:  # noqa: S310
            nodes = {n["node"]: n for n in json.load(resp)["nodes"]}
        return ("gpu-node-a" in nodes and len(nodes["gpu-node-a"]["free"]) < 8
                and "gpu-node-b" in nodes and len(nodes["gpu-node-b"]["free"]) == 8
                and "nvlink-8gpu-p0" in published_partitions(k8s, "gpu-node-b"))  # and its driver offers it

    pod, seen = _eight_gpus_beside_a_blocker(dra_sandbox, k8s, dra.claim_template_name(8), "eight-scored",
                                             before_pod=extender_sees_the_blocker)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == "gpu-node-b"
    assert [node for node, _ in seen] == ["gpu-node-b"], seen
