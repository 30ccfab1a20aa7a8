"""A waiting container's place in its tenancy's queue, from the namespace's Kueue Workloads
(services/api/domain/queue.py): Kueue's own order, the admitted first, the others left out."""

from __future__ import annotations

from typing import Any

from services.api.domain.queue import spots


def workload(
    pod: str,
    created: str,
    *,
    priority: int | None = None,
    conditions: tuple[tuple[str, str, str], ...] = (),
    uid: str | None = None,
) -> dict[str, Any]:
    """A Workload of Kueue's pod integration for ``pod``; ``conditions``: (type, reason, time), all True."""
    return {
        "metadata": {
            "name": f"pod-{pod}-abcde",
            "uid": uid or f"uid-{pod}",
            "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": f"p-{pod}"}],
        },
        "spec": {"queueName": "default", **({"priority": priority} if priority is not None else {})},
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": at} for t, r, at in conditions
            ]
        },
    }


def view(result: dict[str, Any]) -> dict[str, tuple[int, int, str]]:
    return {pod: (s.position, s.gpus_ahead, s.reason) for pod, s in result.items()}


RESERVED = ("QuotaReserved", "QuotaReserved", "2026-11-29T10:00:05Z")
EARLY_RESERVED = ("QuotaReserved", "QuotaReserved", "2026-11-29T10:00:01Z")


def test_pending_workloads_are_in_creation_order_and_count_the_gpus_ahead() -> None:
    result = spots(
        [
            workload("c", "2026-11-29T10:00:03Z"),
            workload("a", "2026-11-29T10:00:01Z"),
            workload("b", "2026-11-29T10:00:02Z"),
        ],
        {"a": 8, "b": 4, "c": 2},
    )
    assert view(result) == {"a": (1, 0, "over_share"), "b": (2, 8, "over_share"), "c": (3, 12, "over_share")}


def test_the_admitted_come_first_then_higher_priority_then_creation() -> None:
    result = spots(
        [
            workload("old", "2026-11-29T10:00:00Z"),
            workload("urgent", "2026-11-29T10:00:09Z", priority=100),
            workload("admitted", "2026-11-29T10:00:08Z", conditions=(RESERVED,)),
            workload("early-admitted", "2026-11-29T10:00:09Z", conditions=(EARLY_RESERVED,)),
        ],
        {"old": 1, "urgent": 2, "admitted": 4, "early-admitted": 8},
    )
    assert view(result) == {
        "early-admitted": (1, 0, "waiting_for_partition"),
        "admitted": (2, 8, "waiting_for_partition"),
        "urgent": (3, 12, "over_share"),
        "old": (4, 14, "over_share"),
    }


def test_ties_go_by_uid_and_a_requeued_workload_goes_by_its_eviction() -> None:
    same = "2026-11-29T10:00:00Z"
    result = spots(
        [
            workload("y", same, uid="2"),
            workload("x", same, uid="1"),
            # evicted by an admission check at 10:00:30: requeued behind z (10:00:20)
            workload("w", "2026-11-29T09:00:00Z", conditions=(("Evicted", "AdmissionCheck", "2026-11-29T10:00:30Z"),)),
            workload("z", "2026-11-29T10:00:20Z"),
            workload("p", "2026-11-29T10:00:25Z", conditions=(("Evicted", "Preempted", "2026-11-29T10:00:26Z"),)),
        ],
        {"x": 1, "y": 1, "z": 1, "w": 1, "p": 1},
    )
    assert [pod for pod, _ in sorted(view(result).items(), key=lambda kv: kv[1][0])] == ["x", "y", "z", "p", "w"]
    assert result["p"].reason == "preempted"
    # queued again by the partition admission check: its GPUs were there, a whole partition was not
    assert result["w"].reason == "waiting_for_partition"
    assert result["z"].reason == "over_share"


def test_a_container_put_back_after_a_preemption_waits_preempted_until_admitted() -> None:
    """restart_on_preemption makes a new pod and Workload: pending, it says why it waits again;
    admitted, it waits for a partition like any other."""
    workloads = [
        workload("back", "2026-11-29T10:00:00Z"),
        workload("again", "2026-11-29T10:00:01Z", conditions=(RESERVED,)),
        workload("new", "2026-11-29T10:00:02Z"),
    ]
    result = spots(workloads, {"back": 4, "again": 2, "new": 1}, requeued={"back", "again"})
    assert view(result) == {
        "again": (1, 0, "waiting_for_partition"),
        "back": (2, 2, "preempted"),
        "new": (3, 6, "over_share"),
    }


def test_only_the_waiting_pods_count_finished_and_other_workloads_are_left_out() -> None:
    result = spots(
        [
            workload("running", "2026-11-29T10:00:00Z", conditions=(RESERVED,)),  # on a node: not in `waiting`
            workload("done", "2026-11-29T10:00:01Z", conditions=(("Finished", "Succeeded", "2026-11-29T10:01:00Z"),)),
            {
                "metadata": {
                    "name": "job-x",
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "x"}],
                }
            },
            workload("mine", "2026-11-29T10:00:02Z"),
        ],
        {"mine": 2, "done": 8, "x": 8, "no-workload-yet": 1},
    )
    assert view(result) == {"mine": (1, 0, "over_share")}
