"""Kueue counts a DRA pod's GPUs (allocation mode dra, queueing kueue): the API's pod requests
``nvidia.com/gpu: N`` beside its ResourceClaim, so its Workload uses N GPUs of its tenancy's
ClusterQueue, as in the device-plugin mode; with its claim alone it would count none (Kueue's own
DRA accounting is off).

The tenancy controller runs in the dra mode under the chart's RBAC for it (its claim templates);
no kube-scheduler, so an admitted pod stays Pending, ungated."""

from __future__ import annotations

from typing import Any

import pytest

from core import dra, kueue
from devtools.waiting import wait_for
from services.api.domain.pods import build_pod
from tests.kueue.conftest import (
    GATE,
    TIMEOUT,
    Queued,
    admitted,
    condition,
    create_tenancy,
    gates,
    tenancy_ready,
    workload,
)

GPU = "nvidia.com/gpu"
NAMESPACE = "tenant-d"


@pytest.fixture(scope="module")
def controller_overrides() -> dict[str, Any]:
    return {"allocation_mode": dra.DRA_MODE}


#: pod name -> the scheduling gates it was created with
CREATED_GATES: dict[str, list[str]] = {}


def _submit(q: Queued, container_id: str, gpus: int) -> str:
    """The API's pod for a ``gpus``-GPU container, as it submits it with allocation mode dra and queueing kueue."""
    pod = build_pod(
        container_id=container_id,
        tenancy="d",
        image="busybox",
        gpus=gpus,
        allocation_mode=dra.DRA_MODE,
        queue=kueue.LOCAL_QUEUE,
        finalizer=False,
    )
    created = q.core.create_namespaced_pod(NAMESPACE, pod)
    # the gates it was created with (Kueue's webhook adds its own; Kueue may admit the pod and
    # lift it before the pod could be read again)
    CREATED_GATES[str(pod["metadata"]["name"])] = [g.name for g in created.spec.scheduling_gates or []]
    return str(pod["metadata"]["name"])


def _usage(q: Queued, pod: str) -> dict[str, str]:
    """What Kueue reserved for the pod's Workload (its one pod set's resourceUsage)."""
    admission = ((workload(q, pod, NAMESPACE) or {}).get("status") or {}).get("admission") or {}
    return dict(admission["podSetAssignments"][0]["resourceUsage"])


def _pending_for_quota(q: Queued, pod: str) -> dict[str, Any] | None:
    cond = condition(workload(q, pod, NAMESPACE), "QuotaReserved")
    return cond if cond and cond["status"] == "False" and cond["reason"] == "Pending" else None


def test_a_dra_pods_workload_counts_its_gpus_against_the_tenancys_queue(controlled: Queued) -> None:
    q = controlled
    create_tenancy(q, "d", quota=8, guaranteed=8)
    wait_for(lambda: tenancy_ready(q, "d"), TIMEOUT, what="tenancy d Ready")
    # the ResourceQuota leaves the GPU cap to Kueue; the DeviceClass backstop stays
    hard = q.core.read_namespaced_resource_quota("tenant-quota", NAMESPACE).spec.hard
    assert f"requests.{GPU}" not in hard and hard[dra.device_class_quota_key()] == "8"

    four = _submit(q, "c-d4", 4)
    assert GATE in CREATED_GATES[four]
    wait_for(lambda: admitted(q, four, NAMESPACE), TIMEOUT, what="the 4-GPU DRA pod admitted")
    assert _usage(q, four) == {GPU: "4"}  # 4 GPUs, not 1 NVLink partition; CPU and memory not counted
    assert q.core.read_namespaced_pod(four, NAMESPACE).spec.resource_claims[0].resource_claim_template_name == (
        dra.claim_template_name(4)
    )

    # 4 + 8 is over the tenancy's 8: the 8-GPU pod waits in the queue, gated
    eight = _submit(q, "c-d8", 8)
    pending = wait_for(lambda: _pending_for_quota(q, eight), TIMEOUT, what="the 8-GPU pod's Workload pending")
    assert GPU in pending["message"] and GATE in gates(q, eight, NAMESPACE)
    # a 4-GPU one still fits
    other = _submit(q, "c-d4b", 4)
    wait_for(lambda: admitted(q, other, NAMESPACE), TIMEOUT, what="a second 4-GPU DRA pod admitted")

    for pod in (four, other):
        q.core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)
    wait_for(lambda: admitted(q, eight, NAMESPACE), TIMEOUT, what="the 8-GPU pod admitted once the GPUs are free")
    assert _usage(q, eight) == {GPU: "8"}
