"""The partition check's passes (``services.placement.admission_check``) on Workloads as Kueue
writes them, its writes recorded: the order of answers, promises kept across a restart, only the
Lease's holder answering, and no write when nothing changed. Kueue itself: tests/kueue."""

from __future__ import annotations

from typing import Any

from core import kueue
from core.kube import Forbidden
from services.placement.admission_check import PartitionCheck
from services.placement.fit import FULL_MASK, mask_of
from services.placement.fleet import FleetIndex, NodeFree


class RecordingKube:
    """Answers the check's reads and records its server-side applies (and its pod patches)."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.pod_patches: list[tuple[str, dict[str, Any]]] = []
        self.pods_forbidden = False  # a chart without the right to patch pods/status

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "GET":  # the AdmissionCheck, already Active
            return {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
        if path.startswith("/api/v1/") and self.pods_forbidden:
            raise Forbidden(f"PATCH {path}: forbidden", status=403)
        if path.startswith("/api/v1/"):
            self.pod_patches.append((path, kwargs["body"]))
            self.applied.append({"kind": "Pod", "path": path})
            return {}
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
    free: set[int],
    workloads: list[dict[str, Any]],
    *,
    leading: bool = True,
    counted: frozenset[str] = frozenset(),
    occupants: dict[str, dict[str, int]] | None = None,
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
        occupants=(lambda: occupants) if occupants is not None else None,
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


def running(name: str, gpus: int, queue: str, priority: int = 100) -> dict[str, Any]:
    """An admitted Workload (its check passed) whose pod runs."""
    obj = workload(name, gpus, "Ready", "2026-12-01T09:00:00Z", queue=queue)
    obj["spec"]["priority"] = priority
    obj["status"]["conditions"].append({"type": "Admitted", "status": "True"})
    return obj


def test_guaranteed_work_takes_back_a_partition_from_borrowers_and_waits_for_it_once() -> None:
    # the board is full: a borrower's quad (1-4) and its interruptible pair (5-6) and another
    # borrower's pair (7-8); "big" is within its guarantee and needs a quad
    workloads = [
        workload("big", 4, "Pending", "2026-12-01T10:00:01Z", queue="tenancy-guaranteed"),
        running("b-quad", 4, "tenancy-b"),
        running("b-spot", 2, "tenancy-b", priority=10),
        running("c-pair", 2, "tenancy-c"),
    ]
    where = {
        "gpu-a": {
            "tenant-a/b-quad": mask_of({1, 2, 3, 4}),
            "tenant-a/b-spot": mask_of({5, 6}),
            "tenant-a/c-pair": mask_of({7, 8}),
        }
    }
    bound = frozenset(where["gpu-a"])
    check, kube = check_on(set(), workloads, occupants=where, counted=bound)
    check._queues_listed([_queue("tenancy-guaranteed", "4"), _queue("tenancy-b", "0"), _queue("tenancy-c", "0")])
    check.run_pass()
    # both quads are held by standard work at most: the one with a single victim, 1-4, is taken
    # back; the victim's pod is told why first, then its admission is withdrawn
    assert [a.get("path") or a["metadata"]["name"] for a in kube.applied] == [
        "pod-big",
        "/api/v1/namespaces/tenant-a/pods/b-quad/status",
        "pod-b-quad",
    ]
    assert answers(kube) == [("pod-big", "Pending"), ("pod-b-quad", "Retry")]
    (condition,) = kube.pod_patches[0][1]["status"]["conditions"]
    assert condition["type"] == kueue.PREEMPTED_FOR_GUARANTEE_CONDITION and condition["status"] == "True"
    assert (
        condition["message"].startswith("Preempted") and "due to reclamation within the cohort" in condition["message"]
    )
    assert (
        "taking back the NVLink 4-GPU partition on gpu-a" in kube.applied[0]["status"]["admissionChecks"][0]["message"]
    )
    assert check.preempted == 1
    # the next pass: the victim's GPUs count as being freed until its pod is gone, so "big"
    # waits for them and nothing more is taken
    check.run_pass()
    assert answers(kube)[2:] == [("pod-big", "Pending")]
    assert "being freed" in kube.applied[-1]["status"]["admissionChecks"][0]["message"]
    check.run_pass()
    assert len(kube.applied) == 4


def test_a_victim_whose_pod_cannot_be_told_why_is_not_preempted_and_holds_up_nothing() -> None:
    workloads = [
        workload("big", 8, "Pending", "2026-12-01T10:00:01Z", queue="tenancy-guaranteed"),
        workload("later", 1, "Pending", "2026-12-01T10:00:02Z", queue="tenancy-b"),
        running("b-board", 8, "tenancy-b"),
    ]
    where = {"gpu-a": {"tenant-a/b-board": FULL_MASK}}
    check, kube = check_on(set(), workloads, occupants=where, counted=frozenset(where["gpu-a"]))
    check._queues_listed([_queue("tenancy-guaranteed", "8"), _queue("tenancy-b", "0")])
    kube.pods_forbidden = True
    check.run_pass()
    # "big" still waits within its guarantee; "b-board" keeps running; "later" is answered
    assert answers(kube) == [("pod-big", "Pending"), ("pod-later", "Retry")]
    assert check.preempted == 0 and not check._evicting
    # once the right is there, the next pass preempts it
    kube.pods_forbidden = False
    check.run_pass()
    assert ("pod-b-board", "Retry") in answers(kube) and check.preempted == 1


def _queue(name: str, nominal: str) -> dict[str, Any]:
    gpus = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    flavor = {"name": "hgx-h100-8", "resources": [gpus]}
    return {"metadata": {"name": name}, "spec": {"resourceGroups": [{"flavors": [flavor]}]}}
