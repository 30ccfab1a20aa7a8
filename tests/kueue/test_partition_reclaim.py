"""A guarantee takes a whole NVLink partition back, on a real Kueue (docs/queues.md, "Partitions").

Kueue's own preemption is blind to NVLink: it frees quota wherever its victims run. Two 8-GPU
nodes, each running two of a borrower's 4-GPU interruptible containers; the tenancy guaranteed 8
asks for a whole board. Kueue preempts the two most recently admitted, one on each node: the quota
is back, and no board is whole. The partition check then takes a board back itself: it preempts
the borrower's container that completes one (setting its pod's ``gpucaas.dev/PreemptedForGuarantee``
condition, then withdrawing its admission), and the guaranteed container is admitted onto it.

On a cluster of this module's own with Kueue and no kube-scheduler or kubelet: this test binds the
pods and plays the nodes (their FabricStates and GPU leases, and the end of a stopped pod), the
tenancy controller and the extender's partition check run under their chart ServiceAccounts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from core import crds, kueue
from devtools.waiting import wait_for
from services.api.domain import reasons
from services.api.domain.pods import build_pod
from tests.kueue.conftest import TIMEOUT, Queued, admitted, condition, create_tenancy, read, tenancy_ready, workload
from tests.kueue.test_partition_check import (  # noqa: F401  (the module's fixtures: a cluster of its own)
    allocation_mode,
    checked,
    controller_overrides,
    publish,
)
from tests.placement.factories import PCI

NODES = ("gpu-node-a", "gpu-node-b")
QUADS = ((1, 2, 3, 4), (5, 6, 7, 8))


def _gpu_node(q: Queued, name: str) -> None:
    """A GPU node as the cohort's pool counts it (its instance type and GPU count), and its
    FabricState with every GPU free."""
    labels = {"node.kubernetes.io/instance-type": "hgx-h100-8", kueue.GPU_COUNT_LABEL: "8"}
    q.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    publish(q, {}, name)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lease_name(node: str, gpu: int) -> str:
    return f"{node}-{PCI[gpu].replace(':', '-').replace('.', '-')}"


def _lease(q: Queued, node: str, gpu: int, holder: tuple[str, str] | None) -> None:
    """The node's GPU lease, Leased by ``holder`` (namespace, pod) or Free, as its lease agent writes it."""
    name = _lease_name(node, gpu)
    try:
        q.custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL, name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        body = {
            "apiVersion": crds.API_VERSION,
            "kind": "GPULease",
            "metadata": {"name": name},
            "spec": {"node": node, "pciAddress": PCI[gpu], "deviceId": "0x2330", "model": "H100 SXM5"},
        }
        q.custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL, body)
    status: dict[str, Any] = {"state": "Free", "holder": None}
    if holder is not None:
        status = {"state": "Leased", "holder": {"namespace": holder[0], "pod": holder[1], "tenancy": "borrower"}}
    q.custom.patch_cluster_custom_object_status(
        crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL, name, {"status": status}
    )


def _submit(q: Queued, mode: str, tenancy: str, container: str, gpus: int, *, interruptible: bool) -> str:
    pod = build_pod(
        container_id=container,
        tenancy=tenancy,
        image="busybox",
        gpus=gpus,
        allocation_mode=mode,  # type: ignore[arg-type]
        queue=kueue.LOCAL_QUEUE,
        interruptible=interruptible,
        finalizer=False,
    )
    q.core.create_namespaced_pod(f"tenant-{tenancy}", pod)
    return str(pod["metadata"]["name"])


def _bind(q: Queued, namespace: str, pod: str, node: str) -> None:
    """Bind the pod to ``node`` as kube-scheduler would."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    q.core.create_namespaced_binding(namespace, body, _preload_content=False)


def _end_stopped_pods(q: Queued, namespace: str, told: dict[str, list[dict[str, Any]]]) -> None:
    """Play the kubelet for the pods Kueue stopped (being deleted): record their conditions, give
    their GPUs back (leases Free) and let them go."""
    for pod in q.core.list_namespaced_pod(namespace).items:
        if pod.metadata.deletion_timestamp is None:
            continue
        raw = q.core.api_client.sanitize_for_serialization(pod)
        told[pod.metadata.name] = raw["status"].get("conditions") or []
        node = pod.spec.node_name
        if raw["status"].get("phase") not in ("Succeeded", "Failed"):  # its process stopped
            q.core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"phase": "Failed"}})
        for lease in q.custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL)["items"]:
            if ((lease.get("status") or {}).get("holder") or {}).get("pod") == pod.metadata.name:
                gpu = next(g for g in range(1, 9) if _lease_name(node, g) == lease["metadata"]["name"])
                _lease(q, node, gpu, None)
        q.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)


def test_a_guarantee_takes_back_a_whole_board_that_kueues_preemption_left_split(
    checked: Queued,  # noqa: F811 (the fixture imported above)
    allocation_mode: str,  # noqa: F811
) -> None:
    q = checked
    for name in NODES:
        _gpu_node(q, name)
    create_tenancy(q, "owner", quota=8, guaranteed=8)
    create_tenancy(q, "borrower", quota=16, guaranteed=0)
    for name in ("owner", "borrower"):
        wait_for(lambda name=name: tenancy_ready(q, name), TIMEOUT, what=f"tenancy {name} Ready")
    wait_for(
        lambda: condition(read(q, "admissionchecks", kueue.PARTITION_CHECK), "Active"),
        TIMEOUT,
        what="the AdmissionCheck marked Active by the extender",
    )

    # the borrower fills both boards with interruptible quads, admitted one after another
    # (Kueue orders its preemption candidates by admission time, to the second): a, b, a, b
    borrower_ns = "tenant-borrower"
    placed: dict[str, tuple[str, tuple[int, ...]]] = {}
    for i, (node, quad) in enumerate(
        [(NODES[0], QUADS[0]), (NODES[1], QUADS[0]), (NODES[0], QUADS[1]), (NODES[1], QUADS[1])]
    ):
        pod = _submit(q, allocation_mode, "borrower", f"spot-{i}", 4, interruptible=True)
        wait_for(lambda pod=pod: admitted(q, pod, borrower_ns), TIMEOUT, what=f"the borrower's quad {i} admitted")
        _bind(q, borrower_ns, pod, node)
        for gpu in quad:
            _lease(q, node, gpu, (borrower_ns, pod))
        placed[pod] = (node, quad)
        # Kueue keeps admission times to the second: the next one is admitted a second later
        reserved_at = condition(workload(q, pod, borrower_ns), "QuotaReserved")["lastTransitionTime"]  # type: ignore[index]
        wait_for(lambda at=reserved_at: _now() > at, TIMEOUT, what="the next second")

    # the owner claims its guarantee: a whole 8-GPU board
    owner_ns = "tenant-owner"
    board = _submit(q, allocation_mode, "owner", "board", 8, interruptible=False)
    told: dict[str, list[dict[str, Any]]] = {}

    def board_admitted() -> bool:
        _end_stopped_pods(q, borrower_ns, told)
        return admitted(q, board, owner_ns)

    wait_for(board_admitted, TIMEOUT, what="the owner's 8-GPU container admitted on a whole board")
    entry = next(
        c for c in workload(q, board, owner_ns)["status"]["admissionChecks"] if c["name"] == kueue.PARTITION_CHECK
    )
    (node,) = [n for n in NODES if entry["message"] == f"whole free NVLink 8-GPU partition on {n}"]
    # every one of the borrower's pods on that board ended; the other board keeps one running
    on_board = {pod for pod, (where, _) in placed.items() if where == node}
    assert on_board <= set(told)
    running = [p.metadata.name for p in q.core.list_namespaced_pod(borrower_ns).items]
    assert len(running) == 1 and placed[running[0]][0] != node
    # Kueue preempted two (one per board: the two most recently admitted), the check one more: the
    # one completing the board, with the check's condition saying why, as the tenant is told
    by_check = [
        pod
        for pod, conditions in told.items()
        if any(c["type"] == kueue.PREEMPTED_FOR_GUARANTEE_CONDITION for c in conditions)
    ]
    assert len(told) == 3 and len(by_check) == 1 and by_check[0] in on_board
    pod = {"status": {"phase": "Failed", "conditions": told[by_check[0]]}}
    assert reasons.preempted_by_queue(pod)
    assert reasons.stopped_by_queue(pod) == "Preempted by the queue: another tenancy claimed its guaranteed GPUs"
