"""Binding conditions in the DRA mode: a partition that cannot be activated is never bound to.

A foreign holder keeps one GPU of gpu-node-a active through the fabric service, so the
8-GPU partition of gpu-node-a, which the first-fit allocator picks, cannot be activated:
the driver reports ``gpucaas.dev/partition-failed``, the scheduler deallocates the claim
and places the pod again, on gpu-node-b. The failed claim leaves no partition active.
"""

from __future__ import annotations

import threading

from kubernetes import client

from gpucaas.core import dra
from gpucaas.core.fabric_client import FabricClient
from gpucaas.devtools.waiting import wait_for
from gpucaas.programs.sandbox import runner
from gpucaas.programs.sandbox.dra_demo import dra_pod, ensure_namespace
from tests.e2e.conftest import activations
from tests.e2e_dra.conftest import pci_of

NS = "e2e-dra-binding"
BLOCKER = "e2e:blocker"


def test_a_failed_activation_deallocates_and_the_pod_runs_elsewhere(dra_sandbox: runner.Sandbox,
                                                                   k8s: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(8,))
    node_a = next(n for n in dra_sandbox.nodes if n.name == "gpu-node-a")

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
        pci = pci_of(dra_sandbox, "gpu-node-a")
        fc.activate(BLOCKER, [pci[min(pci)]])
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
        core.create_namespaced_pod(NS, dra_pod("eight", 8, seconds=2))
        wait_for(lambda: core.read_namespaced_pod("eight", NS).status.phase in ("Succeeded", "Failed"),
                 timeout=240, what="the 8-GPU pod to finish")
    finally:
        stop.set()
        watcher.join(timeout=10)
        with FabricClient(node_a.fabric_socket, timeout=10) as fc:
            fc.release(BLOCKER)
    pod = core.read_namespaced_pod("eight", NS)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == "gpu-node-b"
    assert ("gpu-node-a", dra.BINDING_FAILURE_CONDITION) in seen, seen
    assert ("gpu-node-b", dra.BINDING_CONDITION) in seen, seen
    assert ("gpu-node-a", dra.BINDING_CONDITION) not in seen, seen
    # nothing stays active for the claim that failed on gpu-node-a, nor for the one that ran
    wait_for(lambda: not [a for acts in activations(dra_sandbox).values() for a in acts
                          if a["holder"].startswith("claim:")], timeout=60, what="no partition held by a claim")
