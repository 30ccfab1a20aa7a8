"""Restarts mid-flight in the DRA mode: a node agent (the kubelet's DRA side) and a DRA driver
killed (SIGKILL) while their pods run. Both keep checkpoints, so the pods still finish,
their claims are unprepared (the partitions released) and deleted, and the GPUs' leases
end Free."""

from __future__ import annotations

from kubernetes import client

from core.crds import GPULEASE_PLURAL, GROUP, VERSION
from devtools.waiting import wait_for
from gpucaas.sandbox import runner
from gpucaas.sandbox.dra_demo import dra_pod, ensure_namespace
from tests.e2e.conftest import activations

NS = "e2e-dra-restarts"


def test_killed_node_agent_and_driver_converge(dra_sandbox: runner.Sandbox, k8s: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(2, 8))
    core.create_namespaced_pod(NS, dra_pod("two", 2, seconds=8))
    core.create_namespaced_pod(NS, dra_pod("eight", 8, seconds=8))
    for name in ("two", "eight"):
        wait_for(
            lambda name=name: core.read_namespaced_pod(name, NS).status.phase == "Running",
            timeout=120,
            what=f"pod {name} Running",
        )
    node_two = core.read_namespaced_pod("two", NS).spec.node_name
    node_eight = core.read_namespaced_pod("eight", NS).spec.node_name
    assert node_two != node_eight  # 2 + 8 GPUs do not fit one board
    dra_sandbox.supervisor.restart(f"node-agent-{node_two}", kill=True)
    dra_sandbox.supervisor.restart(f"dra-driver-{node_eight}", kill=True)
    for name in ("two", "eight"):
        wait_for(
            lambda name=name: core.read_namespaced_pod(name, NS).status.phase in ("Succeeded", "Failed"),
            timeout=180,
            what=f"pod {name} to finish",
        )
        assert core.read_namespaced_pod(name, NS).status.phase == "Succeeded"
    wait_for(
        lambda: not custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"],
        timeout=60,
        what="the claims deleted",
    )
    wait_for(
        lambda: not [a for acts in activations(dra_sandbox).values() for a in acts if a["holder"].startswith("claim:")],
        timeout=60,
        what="no partition held by a claim",
    )
    wait_for(
        lambda: all(
            (lz.get("status") or {}).get("state") == "Free"
            for lz in custom.list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]
        ),
        timeout=120,
        what="every lease Free",
    )
