"""The partition check's passes (``services.placement.admission_check``) on Workloads as Kueue
writes them, its writes recorded: the order of answers, promises kept across a restart, only the
Lease's holder answering, and no write when nothing changed. Kueue itself: tests/kueue."""

from __future__ import annotations

from typing import Any

from core import kueue
from services.placement.admission_check import PartitionCheck
from services.placement.fit import FULL_MASK, mask_of
from services.placement.fleet import FleetIndex, NodeFree


class RecordingKube:
    """Answers the check's reads and records its server-side applies."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "GET":  # the AdmissionCheck, already Active
            return {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
        self.applied.append(kwargs["body"])
        return {}


class Elector:
    def __init__(self, leading: bool) -> None:
        self.is_leading = leading

    def leading(self) -> bool:
        return self.is_leading


def workload(name: str, gpus: int, state: str, reserved_at: str, queue: str = "tenancy-a") -> dict[str, Any]:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "metadata": {
            "name": f"pod-{name}",
            "namespace": "tenant-a",
            "uid": f"uid-{name}",
            "creationTimestamp": reserved_at,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": f"pod-uid-{name}"}],
        },
        "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}]},
        "status": {
            "admission": {"clusterQueue": queue},
            "conditions": [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": reserved_at}],
            "admissionChecks": [
                {"name": kueue.PARTITION_CHECK, "state": state, "message": "", "lastTransitionTime": reserved_at}
            ],
        },
    }


def check_on(
    free: set[int], workloads: list[dict[str, Any]], *, leading: bool = True, counted: frozenset[str] = frozenset()
) -> tuple[PartitionCheck, RecordingKube]:
    index = FleetIndex()
    index.set_node(NodeFree("gpu-a", mask_of(free), FULL_MASK))
    kube = RecordingKube()
    check = PartitionCheck(
        kube,  # type: ignore[arg-type]
        index,
        counted=lambda key: key in counted,
        freeing=lambda: {},
        synced=lambda: True,
        elector=Elector(leading),  # type: ignore[arg-type]
    )
    check._listed(workloads)
    check._informer.synced.set()
    check._queues.synced.set()
    return check, kube


def answers(kube: RecordingKube) -> list[tuple[str, str]]:
    return [
        (body["metadata"]["name"], body["status"]["admissionChecks"][0]["state"])
        for body in kube.applied
        if body["kind"] == "Workload"
    ]


def test_the_oldest_reservation_is_answered_first_and_its_gpus_are_promised() -> None:
    check, kube = check_on(
        set(range(5, 9)),
        [
            workload("late", 4, "Pending", "2026-12-01T10:00:05Z"),
            workload("early", 4, "Pending", "2026-12-01T10:00:01Z"),
        ],
    )
    check.run_pass()
    assert answers(kube) == [("pod-early", "Ready"), ("pod-late", "Retry")]
    retry = kube.applied[1]["status"]["admissionChecks"][0]
    assert retry["requeueAfterSeconds"] == 5 and "no whole free NVLink 4-GPU partition" in retry["message"]
    # nothing changed: nothing written again
    check.run_pass()
    assert len(kube.applied) == 2
    # a watch event older than the answer brings "early" back Pending: its own promise does not
    # stand in its way, it is answered Ready again
    check._event("MODIFIED", workload("early", 4, "Pending", "2026-12-01T10:00:01Z"))
    check.run_pass()
    assert answers(kube)[2:] == [("pod-early", "Ready")]


def test_after_a_restart_what_was_passed_before_is_promised_again_first() -> None:
    # "before" passed earlier (Ready) and its pod is on no node yet: its quad stays its own
    check, kube = check_on(
        set(range(5, 9)),
        [
            workload("new", 4, "Pending", "2026-12-01T10:00:01Z"),
            workload("before", 4, "Ready", "2026-12-01T10:00:09Z"),
        ],
    )
    check.run_pass()
    assert answers(kube) == [("pod-new", "Retry")]
    # once a node counts the pod, the promise goes and the GPUs are the node's report's
    check, kube = check_on(
        set(range(5, 9)),
        [
            workload("new", 4, "Pending", "2026-12-01T10:00:01Z"),
            workload("before", 4, "Ready", "2026-12-01T10:00:09Z"),
        ],
        counted=frozenset({"tenant-a/before"}),
    )
    check.run_pass()
    assert answers(kube) == [("pod-new", "Ready")]


def test_a_replica_that_does_not_hold_the_lease_answers_nothing() -> None:
    check, kube = check_on(set(range(1, 9)), [workload("w", 8, "Pending", "2026-12-01T10:00:01Z")], leading=False)
    check.run_pass()
    assert answers(kube) == []


def test_guaranteed_work_keeps_its_quota_and_holds_the_partition_nearest_to_free() -> None:
    # GPUs 1 and 6 busy: the quads 1-4 and 5-8 each have 3 free; "big" (8 GPUs) cannot start
    check, kube = check_on(
        {2, 3, 4, 5, 7, 8},
        [
            workload("big", 8, "Pending", "2026-12-01T10:00:01Z", queue="tenancy-guaranteed"),
            workload("quad", 4, "Pending", "2026-12-01T10:00:02Z", queue="tenancy-borrower"),
            workload("one", 1, "Pending", "2026-12-01T10:00:03Z", queue="tenancy-borrower"),
        ],
    )
    # tenancy-guaranteed's 8 GPUs are within its nominal quota; the borrower's 5 are beyond its 0
    check._queues_listed([_queue("tenancy-guaranteed", "8"), _queue("tenancy-borrower", "0")])
    check.run_pass()
    assert answers(kube) == [("pod-big", "Pending"), ("pod-quad", "Retry"), ("pod-one", "Retry")]
    big = kube.applied[0]["status"]["admissionChecks"][0]
    assert "within the tenancy's guarantee" in big["message"] and "requeueAfterSeconds" not in big
    # without the hold the borrower's 1-GPU pod would take a GPU of the board "big" waits for


def _queue(name: str, nominal: str) -> dict[str, Any]:
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    flavor = {"name": "hgx-h100-8", "resources": [gpus]}
    return {"metadata": {"name": name}, "spec": {"resourceGroups": [{"flavors": [flavor]}]}}
