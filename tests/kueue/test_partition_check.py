"""Kueue's partition AdmissionCheck: Kueue counts GPUs, and admits a 4-GPU container only once the
scheduler extender finds a whole free NVLink quad for it (docs/queues.md).

On a cluster of its own with Kueue and no kube-scheduler: the tenancy controller with the
partition check on (it keeps the AdmissionCheck and lists it in the ClusterQueue) and the
extender's fleet index with the check, both under their chart ServiceAccounts and the RBAC the
chart renders for ``queueing.mode: kueue`` (the extender holding the check's Lease). One node's
FabricState says what is free: GPU 1 and GPU 5 are held, so 6 GPUs are free and no quad is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core import crds, dra, kueue
from core.kube import Kube
from devtools.waiting import WaitTimeout, wait_for
from gpucaas import chart
from services.api.domain.pods import build_pod
from services.placement.admission_check import PartitionCheck
from services.placement.fleet import FleetIndex
from services.placement.kube import FleetWatcher, new_kube
from services.placement.leader import LeaseElector
from services.placement.main import PARTITION_CHECK_LEASE
from tests.kueue.conftest import (
    GATE,
    TIMEOUT,
    Queued,
    admitted,
    condition,
    create_tenancy,
    gates,
    read,
    tenancy_ready,
    workload as workload_of,
)
from tests.placement.factories import fabric_status

NODE = "gpu-node-a"
NAMESPACE = "tenant-acme"
#: the single-GPU partitions of GPUs 1 and 5 (in NVIDIA's table, partition 6 + g holds GPU g alone)
HOLD_1, HOLD_5 = 7, 11


@pytest.fixture(scope="module")
def allocation_mode() -> dra.AllocationMode:
    """The allocation mode of the controller and the pods (test_partition_check_dra.py: dra)."""
    return dra.DEVICE_PLUGIN_MODE


@pytest.fixture(scope="module")
def controller_overrides(allocation_mode: dra.AllocationMode) -> dict[str, Any]:
    return {"partition_check": True, "allocation_mode": allocation_mode}


@pytest.fixture(scope="module")
def checked(controlled: Queued) -> Iterator[Queued]:
    """``controlled`` with the extender's fleet watcher and partition check running."""
    kube = new_kube(str(controlled.kubeconfigs["scheduler-extender"]))
    index = FleetIndex()
    watcher = FleetWatcher(kube, index, watch_timeout_seconds=30, retry_seconds=0.2)
    watcher.start()
    # as the chart runs it: the holder of the Lease in the release namespace answers (its Role)
    elector = LeaseElector(kube, chart.NAMESPACE, PARTITION_CHECK_LEASE, "extender-0")
    check = PartitionCheck(
        kube,
        index,
        counted=watcher.counted,
        freeing=watcher.freeing,
        occupants=watcher.occupants,
        synced=watcher.is_synced,
        elector=elector,
    ).start()
    try:
        yield controlled
    finally:
        check.stop()
        watcher.stop()
        kube.close()


def publish(q: Queued, active: dict[int, str | None], node: str = NODE) -> None:
    """The node's FabricState as its fabric service publishes it: ``active`` partitions held."""
    admin = Kube.of(q.custom.api_client)
    body = {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": node}, "spec": {"node": node}}
    if read_fabric(q, node) is None:
        admin.call(q.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
    admin.call(
        q.custom.patch_cluster_custom_object_status,
        crds.GROUP,
        crds.VERSION,
        crds.FABRICSTATE_PLURAL,
        node,
        {"status": fabric_status(active=active)},
        idempotent=True,
    )


def read_fabric(q: Queued, node: str = NODE) -> dict[str, Any] | None:
    # retried: a CRD made with the cluster's objects answers 429 while its storage initialises
    admin = Kube.of(q.custom.api_client)
    items = admin.json(
        q.custom.list_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, idempotent=True
    )["items"]
    return next((o for o in items if o["metadata"]["name"] == node), None)


def _submit(q: Queued, mode: dra.AllocationMode, container: str, gpus: int, tenancy: str = "acme") -> str:
    pod = build_pod(
        container_id=container,
        tenancy=tenancy,
        image="busybox",
        gpus=gpus,
        allocation_mode=mode,
        queue=kueue.LOCAL_QUEUE,
        finalizer=False,
    )
    q.core.create_namespaced_pod(f"tenant-{tenancy}", pod)
    return str(pod["metadata"]["name"])


def _check(q: Queued, pod: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
    """The partition check's entry in the pod's Workload."""
    checks = ((workload_of(q, pod, namespace) or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in checks if c["name"] == kueue.PARTITION_CHECK), None)


def _queued_again(q: Queued, pod: str) -> bool:
    """Kueue evicted the pod's Workload for the check (or the check says Retry), its pod still gated."""
    evicted = condition(workload_of(q, pod, NAMESPACE), "Evicted")
    entry = _check(q, pod) or {}
    by_check = entry.get("state") == "Retry" or bool(evicted and evicted.get("reason") == "AdmissionCheck")
    return by_check and GATE in gates(q, pod, NAMESPACE)


def _explained(q: Queued, predicate: Callable[[], Any], what: str, pods: list[tuple[str, str]]) -> None:
    """wait_for, saying on a time-out where each pod's Workload stands (its conditions and checks)."""
    try:
        wait_for(predicate, TIMEOUT, what=what)
    except WaitTimeout as exc:
        states = {}
        for pod, namespace in pods:
            status = (workload_of(q, pod, namespace) or {}).get("status") or {}
            states[pod] = {
                "conditions": [(c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []],
                "checks": status.get("admissionChecks"),
                "gates": gates(q, pod, namespace),
            }
        raise AssertionError(f"{exc}; the Workloads now: {states}; the fabric: {read_fabric(q)}") from None


def test_kueue_admits_a_quad_only_when_a_whole_free_quad_exists(
    checked: Queued, allocation_mode: dra.AllocationMode
) -> None:
    q = checked
    mode = allocation_mode
    publish(q, {HOLD_1: "other/one", HOLD_5: "other/five"})  # free: 2, 3, 4, 6, 7, 8
    # acme borrows the idle guarantee of lender (16 GPUs): what it holds is borrowed
    create_tenancy(q, "lender", quota=16, guaranteed=16)
    create_tenancy(q, "acme", quota=16, guaranteed=0)
    for name in ("lender", "acme"):
        wait_for(lambda name=name: tenancy_ready(q, name), TIMEOUT, what=f"tenancy {name} Ready")
    cq = read(q, "clusterqueues", "tenancy-acme") or {}
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": kueue.PARTITION_CHECK}]}
    wait_for(
        lambda: condition(read(q, "admissionchecks", kueue.PARTITION_CHECK), "Active"),
        TIMEOUT,
        what="the AdmissionCheck marked Active by the extender",
    )

    # 16 GPUs of quota and 6 free, but no whole quad: queued again, its pod gated, quota given back
    quad = _submit(q, mode, "c-quad", 4)
    pods = [(quad, NAMESPACE)]
    _explained(q, lambda: _queued_again(q, quad), "the 4-GPU Workload queued again by the check", pods)
    assert not admitted(q, quad, NAMESPACE)
    # a pair fits (GPUs 2 and 4): admitted, and its GPUs promised while no node has its pod
    pair = _submit(q, mode, "c-pair", 2)
    pods.append((pair, NAMESPACE))
    _explained(q, lambda: admitted(q, pair, NAMESPACE), "the 2-GPU pod admitted", pods)
    assert "whole free NVLink 2-GPU partition on gpu-node-a" in (_check(q, pair) or {})["message"]
    assert not admitted(q, quad, NAMESPACE)

    # GPU 5 freed: the quad 5-8 is whole, and the 4-GPU Workload passes at its next try
    publish(q, {HOLD_1: "other/one"})
    _explained(q, lambda: admitted(q, quad, NAMESPACE), "the 4-GPU pod admitted once a quad is free", pods)
    assert "4-GPU partition on gpu-node-a" in (_check(q, quad) or {})["message"]
    # that quad is promised to it: another 4-GPU container waits, although 4 GPUs look free
    second = _submit(q, mode, "c-quad-2", 4)
    pods.append((second, NAMESPACE))
    _explained(q, lambda: _queued_again(q, second), "a second 4-GPU Workload queued again", pods)
    assert not admitted(q, second, NAMESPACE)
    # for want of a free quad now, not for want of healthy GPUs: it is tried again soon
    _explained(
        q,
        lambda: "no whole free NVLink 4-GPU partition now" in (_check(q, second) or {}).get("message", ""),
        "the check's reason on the second 4-GPU Workload",
        pods,
    )

    # lender's own 8-GPU container is within its guarantee: it keeps its quota (Pending, not
    # queued again) until a whole board frees, the free GPUs of the board held for it
    board = _submit(q, mode, "c-board", 8, tenancy="lender")
    pods.append((board, "tenant-lender"))
    _explained(
        q,
        lambda: "within the tenancy's guarantee" in (_check(q, board, "tenant-lender") or {}).get("message", ""),
        "lender's 8-GPU Workload kept waiting within its guarantee",
        pods,
    )
    entry = _check(q, board, "tenant-lender") or {}
    assert entry["state"] == "Pending" and not admitted(q, board, "tenant-lender")
    assert condition(workload_of(q, board, "tenant-lender"), "QuotaReserved")
