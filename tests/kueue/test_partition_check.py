"""Kueue's partition AdmissionCheck: Kueue counts GPUs, and admits a 4-GPU container only once the
scheduler extender finds a whole free NVLink quad for it (docs/queues.md).

On a cluster of its own with Kueue and no kube-scheduler: the tenancy controller with the
partition check on (it keeps the AdmissionCheck and lists it in the ClusterQueue) and the
extender's fleet index with the check, both under their chart ServiceAccounts and the RBAC the
chart renders for ``queueing.mode: kueue``. One node's FabricState says what is free: GPU 1 and
GPU 5 are held, so 6 GPUs are free and no quad is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from core import crds, kueue
from core.kube import Kube
from devtools.waiting import wait_for
from services.api.domain.pods import build_pod
from services.placement.admission_check import PartitionCheck
from services.placement.fleet import FleetIndex
from services.placement.kube import FleetWatcher, new_kube
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
def controller_overrides() -> dict[str, Any]:
    return {"partition_check": True}


@pytest.fixture(scope="module")
def checked(controlled: Queued) -> Iterator[Queued]:
    """``controlled`` with the extender's fleet watcher and partition check running."""
    kube = new_kube(str(controlled.kubeconfigs["scheduler-extender"]))
    index = FleetIndex()
    watcher = FleetWatcher(kube, index, watch_timeout_seconds=30, retry_seconds=0.2)
    watcher.start()
    check = PartitionCheck(
        kube, index, counted=watcher.counted, freeing_gpus=watcher.freeing_gpus, synced=watcher.is_synced
    ).start()
    try:
        yield controlled
    finally:
        check.stop()
        watcher.stop()
        kube.close()


def _publish(q: Queued, active: dict[int, str | None]) -> None:
    admin = Kube.of(q.custom.api_client)
    body = {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": NODE}, "spec": {"node": NODE}}
    if read_fabric(q) is None:
        admin.call(q.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
    admin.call(
        q.custom.patch_cluster_custom_object_status,
        crds.GROUP,
        crds.VERSION,
        crds.FABRICSTATE_PLURAL,
        NODE,
        {"status": fabric_status(active=active)},
    )


def read_fabric(q: Queued) -> dict[str, Any] | None:
    items = q.custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL)["items"]
    return next((o for o in items if o["metadata"]["name"] == NODE), None)


def _submit(q: Queued, container: str, gpus: int) -> str:
    pod = build_pod(
        container_id=container, tenancy="acme", image="busybox", gpus=gpus, queue=kueue.LOCAL_QUEUE, finalizer=False
    )
    q.core.create_namespaced_pod(NAMESPACE, pod)
    return str(pod["metadata"]["name"])


def _check(q: Queued, pod: str) -> dict[str, Any] | None:
    """The partition check's entry in the pod's Workload."""
    checks = ((workload_of(q, pod, NAMESPACE) or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in checks if c["name"] == kueue.PARTITION_CHECK), None)


def _queued_again(q: Queued, pod: str) -> bool:
    """Kueue evicted the pod's Workload for the check (or the check says Retry), its pod still gated."""
    evicted = condition(workload_of(q, pod, NAMESPACE), "Evicted")
    entry = _check(q, pod) or {}
    by_check = entry.get("state") == "Retry" or bool(evicted and evicted.get("reason") == "AdmissionCheck")
    return by_check and GATE in gates(q, pod, NAMESPACE)


def test_kueue_admits_a_quad_only_when_a_whole_free_quad_exists(checked: Queued) -> None:
    q = checked
    _publish(q, {HOLD_1: "other/one", HOLD_5: "other/five"})  # free: 2, 3, 4, 6, 7, 8
    create_tenancy(q, "acme", quota=16, guaranteed=16)
    wait_for(lambda: tenancy_ready(q, "acme"), TIMEOUT, what="tenancy acme Ready")
    cq = read(q, "clusterqueues", "tenancy-acme") or {}
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": kueue.PARTITION_CHECK}]}
    wait_for(
        lambda: condition(read(q, "admissionchecks", kueue.PARTITION_CHECK), "Active"),
        TIMEOUT,
        what="the AdmissionCheck marked Active by the extender",
    )

    # 16 GPUs of quota and 6 free, but no whole quad: queued again, its pod gated, quota given back
    quad = _submit(q, "c-quad", 4)
    wait_for(lambda: _queued_again(q, quad), TIMEOUT, what="the 4-GPU Workload queued again by the check")
    assert not admitted(q, quad, NAMESPACE)
    # a pair fits (GPUs 2 and 4): admitted, and its GPUs promised while no node has its pod
    pair = _submit(q, "c-pair", 2)
    wait_for(lambda: admitted(q, pair, NAMESPACE), TIMEOUT, what="the 2-GPU pod admitted")
    assert "whole free NVLink 2-GPU partition on gpu-node-a" in (_check(q, pair) or {})["message"]
    assert not admitted(q, quad, NAMESPACE)

    # GPU 5 freed: the quad 5-8 is whole, and the 4-GPU Workload passes at its next try
    _publish(q, {HOLD_1: "other/one"})
    wait_for(lambda: admitted(q, quad, NAMESPACE), TIMEOUT, what="the 4-GPU pod admitted once a quad is free")
    assert "4-GPU partition on gpu-node-a" in (_check(q, quad) or {})["message"]
    # that quad is promised to it: another 4-GPU container waits, although 4 GPUs look free
    second = _submit(q, "c-quad-2", 4)
    wait_for(lambda: _queued_again(q, second), TIMEOUT, what="a second 4-GPU Workload queued again")
    assert not admitted(q, second, NAMESPACE)
    # for want of a free quad now, not for want of healthy GPUs: it is tried again soon
    wait_for(
        lambda: "no whole free NVLink 4-GPU partition now" in (_check(q, second) or {}).get("message", ""),
        TIMEOUT,
        what="the check's reason on the second 4-GPU Workload",
    )
