"""Where a waiting container stands in its tenancy's queue, with queueing by Kueue (docs/queues.md).

Kueue makes one Workload per pod (its plain-pod integration) in the pod's namespace. A tenancy's
waiting containers are, in this order:

1. those Kueue has admitted (quota reserved) whose pods no node has taken yet: they wait for a
   node with a whole free partition, in the order Kueue admitted them;
2. those still pending in the tenancy's LocalQueue, in the order Kueue pops them from its
   ClusterQueue: higher ``spec.priority`` first, then the queue-order timestamp (the
   Workload's creation, or its requeueing after an admission check evicted it), then the uid.

A container's ``position`` is its rank there (1: next), ``gpus_ahead`` the GPUs of those
before it. Only the tenancy's own namespace is read: what other tenancies wait for, and how
much of the cohort they hold, never shows (a tenancy over its share learns that it is, not
whose work is ahead).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlmodel import SQLModel

#: ``over_share``: Kueue has not reserved the GPUs: the tenancy's guarantee is in use and the
#: cohort has nothing it may borrow now. ``waiting_for_partition``: admitted, waiting for a node
#: with a whole free NVLink partition of its size, or queued again by the partition admission
#: check for want of one. ``preempted``: its run was preempted and it waits again.
QueueReason = Literal["over_share", "waiting_for_partition", "preempted"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class QueueSpot(SQLModel):
    position: int
    gpus_ahead: int
    reason: QueueReason


def _time(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else _EPOCH
    except ValueError:  # never from kube-apiserver, which writes RFC 3339
        return _EPOCH


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def owner_pod(workload: dict[str, Any]) -> str | None:
    """The pod a Workload of Kueue's plain-pod integration stands for."""
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("name") for r in refs if r.get("kind") == "Pod" and r.get("apiVersion") == "v1"), None)


def _queue_order_time(workload: dict[str, Any]) -> datetime:
    """Kueue's queue-order timestamp (``workload.Ordering.GetQueueOrderTimestamp`` with its
    default configuration): creation, moved to the eviction for a Workload an admission check
    evicted, and just after its preemption for one preempted while borrowing."""
    evicted = _condition(workload, "Evicted")
    if evicted and evicted.get("reason") == "AdmissionCheck":
        return _time(evicted.get("lastTransitionTime"))
    preempted = _condition(workload, "Preempted")
    if preempted and preempted.get("reason") == "InCohortReclaimWhileBorrowing":
        return _time(preempted.get("lastTransitionTime")) + timedelta(milliseconds=1)
    return _time((workload.get("metadata") or {}).get("creationTimestamp"))


def spots(
    workloads: list[dict[str, Any]], waiting: dict[str, int], *, requeued: Collection[str] = ()
) -> dict[str, QueueSpot]:
    """``{pod name: QueueSpot}`` for the pods of ``waiting`` (pod name -> GPUs: the tenancy's
    containers that wait with their pod made and on no node) that have a Workload.

    ``workloads`` are the Workloads of the tenancy's namespace; others (finished, or of a pod
    that is no longer waiting) are left out of the count. ``requeued``: pods of containers the
    queue preempted and put back (``restart_on_preemption``), whose new Workload Kueue has not
    admitted yet: preempted, as an evicted Workload is."""
    admitted: list[tuple[datetime, str, str]] = []
    pending: list[tuple[int, datetime, str, str]] = []
    reasons: dict[str, QueueReason] = {}
    for workload in workloads:
        pod = owner_pod(workload)
        if pod is None or pod not in waiting or _condition(workload, "Finished"):
            continue
        meta = workload.get("metadata") or {}
        reserved = _condition(workload, "QuotaReserved")
        if reserved:
            admitted.append((_time(reserved.get("lastTransitionTime")), str(meta.get("name")), pod))
            reasons[pod] = "waiting_for_partition"
            continue
        priority = int((workload.get("spec") or {}).get("priority") or 0)
        pending.append((-priority, _queue_order_time(workload), str(meta.get("uid")), pod))
        evicted = _condition(workload, "Evicted")
        preempted = pod in requeued or bool(evicted and evicted.get("reason") == "Preempted")
        # queued again by the partition admission check: its GPUs were there, a whole partition not
        partition = bool(evicted and evicted.get("reason") == "AdmissionCheck")
        reasons[pod] = "preempted" if preempted else "waiting_for_partition" if partition else "over_share"
    ordered = [pod for *_, pod in sorted(admitted)] + [pod for *_, pod in sorted(pending)]
    out: dict[str, QueueSpot] = {}
    ahead = 0
    for position, pod in enumerate(ordered, start=1):
        out[pod] = QueueSpot(position=position, gpus_ahead=ahead, reason=reasons[pod])
        ahead += waiting[pod]
    return out
