"""Reasons and results: why a container waits (scheduler, image pull, quota), its exit code
and a tenant-worded end (timeout, OOM, exit code), and its timeline at /events."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc

from core import kueue
from devtools.waiting import wait_for
from services.api.domain import pods, reasons
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import bind_pod, get_pod, mark_tenancy_ready, set_pod_status

IMAGE = "nvcr.io/acme/private:1"


def _pod(status: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": IMAGE}]}
    if any(c.get("reason") == "SchedulingGated" for c in status.get("conditions", [])):
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]  # as Kueue's webhook gates it
    status = dict(status)  # the cases' own dicts stay as written
    meta = {"deletionTimestamp": "2026-11-29T10:00:00Z"} if status.pop("deleted", False) else {}
    return {"metadata": meta, "spec": spec, "status": status}


def _waiting(reason: str, message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "containerStatuses": [{"name": "main", "state": {"waiting": {"reason": reason, "message": message}}}],
    }


def _terminated(code: int, reason: str, pod_reason: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Failed" if code else "Succeeded",
        "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": code, "reason": reason}}}],
    }
    if pod_reason:
        status["reason"] = pod_reason
    return status


UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/2 nodes fit: gpu-a: 2 free GPUs, 8 asked; gpu-b: no NVLink partition of 8 free",
        }
    ],
}


def _stopped_by_kueue(
    status: dict[str, Any], cause: str, reason: str = "WorkloadEvictedDueToPreempted"
) -> dict[str, Any]:
    """``status`` with the condition Kueue's pod integration sets before it deletes a pod it stops
    (its message as Kueue's preemption writes it, naming the preemptor and another tenancy's queue)."""
    message = (
        "Preempted to accommodate a workload (UID: 0c5e, JobUID: 77ab) due to "
        f"{cause}; preemptor path: /gpucaas/tenancy-rival; preemptee path: /gpucaas/tenancy-mine"
    )
    condition = {"type": "TerminationTarget", "status": "True", "reason": reason, "message": message}
    return {**status, "conditions": [*status.get("conditions", []), condition]}


CASES = [
    (
        "unschedulable",
        UNSCHEDULABLE,
        0,
        ("waiting for GPUs: 0/2 nodes fit: gpu-a: 2 free GPUs, 8 asked; gpu-b: no NVLink partition of 8 free", None),
    ),
    (
        "pull-unauthorized",
        _waiting(
            "ImagePullBackOff", 'Back-off pulling image "nvcr.io/acme/private:1": failed to authorize: 401 Unauthorized'
        ),
        0,
        (
            "ImagePullBackOff: unauthorized for nvcr.io/acme/private:1 (image pull failed; register a credential for "
            "nvcr.io with POST /v1/registry-credentials)",
            None,
        ),
    ),
    (
        "pull-not-found",
        _waiting("ErrImagePull", "manifest unknown"),
        0,
        ("ErrImagePull: nvcr.io/acme/private:1 not found (image pull failed)", None),
    ),
    (
        "missing-secret",
        _waiting("CreateContainerConfigError", 'secret "gpucaas-secret-hf" not found'),
        0,
        ('CreateContainerConfigError: secret "gpucaas-secret-hf" not found', None),
    ),
    ("exit-0", _terminated(0, "Completed"), 0, ("Completed: finished with exit code 0", 0)),
    ("exit-3", _terminated(3, "Error"), 0, ("Error: failed with exit code 3", 3)),
    (
        "oom",
        _terminated(137, "OOMKilled"),
        0,
        ("OOMKilled: the container ran out of memory (exit code 137); ask for more memory", 137),
    ),
    (
        "timeout",
        _terminated(137, "Error", "DeadlineExceeded"),
        600,
        ("timeout_seconds exceeded (600 s): the container was stopped", 137),
    ),
    (
        "timeout-before-start",
        {
            "phase": "Failed",
            "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline",
        },
        60,
        ("timeout_seconds exceeded (60 s): the container was stopped", None),
    ),
    (
        "preempted-running",
        _stopped_by_kueue(_terminated(143, "Error"), "Fair Sharing within the cohort"),
        0,
        (
            "Preempted by the queue: fair sharing gave its GPUs to a tenancy using less than its share "
            "(Error: failed with exit code 143)",
            143,
        ),
    ),
    (
        "preempted-waiting",
        _stopped_by_kueue(UNSCHEDULABLE, "reclamation within the cohort while borrowing", reason="WorkloadEvicted"),
        0,
        (
            "Preempted by the queue: another tenancy claimed the guaranteed GPUs it was borrowing "
            "(waiting for GPUs: 0/2 nodes fit: gpu-a: 2 free GPUs, 8 asked; gpu-b: no NVLink partition of 8 free)",
            None,
        ),
    ),
    (
        "deleted-and-ended-by-podgc",
        {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}],
            "deleted": True,
        },
        0,
        ("pod deleted", None),
    ),
    (
        "gated-by-kueue",
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
        },
        0,
        ("waiting in the queue: its GPUs are not reserved yet (where it stands: queue)", None),
    ),
    (
        "preempted-by-priority",
        _stopped_by_kueue({"phase": "Running"}, "prioritization in the ClusterQueue"),
        0,
        ("Preempted by the queue: a higher-priority container of your tenancy needed its GPUs", None),
    ),
]


@pytest.mark.parametrize(("status", "timeout", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_explain(status: dict[str, Any], timeout: int, expected: tuple[str, int | None]) -> None:
    outcome = reasons.explain(_pod(status), container="main", image=IMAGE, timeout=timeout or None)
    assert (outcome.message, outcome.exit_code) == expected


def test_what_kueue_says_of_a_preemption_never_reaches_the_tenant() -> None:
    """Kueue's message names the preempting workload and another tenancy's queue: only the cause is told."""
    for cause in ("reclamation within the cohort", "Fair Sharing within the cohort", "something new"):
        pod = _pod(_stopped_by_kueue({"phase": "Pending"}, cause))
        told = reasons.explain(pod, container="main", image=IMAGE).message or ""
        assert told.startswith("Preempted by the queue: ")
        assert not any(word in told for word in ("rival", "0c5e", "77ab", "path", "UID"))
    other = _pod(
        {
            "conditions": [
                {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToClusterQueueStopped"}
            ]
        }
    )
    assert reasons.stopped_by_queue(other) == "Stopped by the queue: its admission was withdrawn"
    assert reasons.stopped_by_queue(_pod({"phase": "Failed"})) is None
    # a gate that is not Kueue's keeps the scheduler's words
    gated = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
    }
    other_gate = {"spec": {"schedulingGates": [{"name": "example.com/wait"}]}, "status": gated}
    assert reasons.explain(other_gate, container="main", image=IMAGE).message == "waiting for GPUs: SchedulingGated"


def test_only_a_preemption_makes_the_reason_preempted() -> None:
    """The container's ``reason`` is the platform's word for ending it: a preemption, never a
    withdrawn admission for another cause, never the process's own end."""
    preempted = _pod(_stopped_by_kueue({"phase": "Failed"}, "Fair Sharing within the cohort"))
    assert pods.container_status_from_pod(preempted).reason == "Preempted"
    withdrawn = _pod(
        {
            "phase": "Failed",
            "conditions": [
                {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToClusterQueueStopped"}
            ],
        }
    )
    assert pods.container_status_from_pod(withdrawn).reason is None
    assert pods.container_status_from_pod(_pod({"phase": "Failed"})).reason is None
    # a program that exits 0 on SIGTERM was still cut short: Failed, reason Preempted, exit code 0
    graceful = pods.container_status_from_pod(
        _pod(_stopped_by_kueue(_terminated(0, "Completed"), "reclamation within the cohort"))
    )
    assert (graceful.status, graceful.reason, graceful.exit_code) == ("Failed", "Preempted", 0)
    assert graceful.message == (
        "Preempted by the queue: another tenancy claimed its guaranteed GPUs (Completed: finished with exit code 0)"
    )
    # without a preemption, exit code 0 is a success
    assert pods.container_status_from_pod(_pod(_terminated(0, "Completed"))).status == "Succeeded"


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def _post_event(k8s: Any, ns: str, pod: str, reason: str, message: str, when: str) -> None:
    kc.CoreV1Api(k8s).create_namespaced_event(
        ns,
        {
            "metadata": {"name": f"{pod}.{reason.lower()}", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
            "reason": reason,
            "message": message,
            "type": "Normal",
            "count": 1,
            "firstTimestamp": when,
            "lastTimestamp": when,
            "source": {"component": "kubelet"},
        },
    )


def test_waiting_reason_exit_code_and_timeline(api: ApiServer, k8s: Any) -> None:
    def at(seconds: int) -> str:
        """A time after the submission (the API's own entries carry real times)."""
        start = datetime.fromisoformat(submitted["created_at"].replace("Z", "+00:00")) + timedelta(seconds=1)
        return (start + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    with api.client() as admin:
        token = new_tenancy(admin, "story")
    with api.client(token) as c:
        submitted = c.post("/v1/containers", json={"image": IMAGE, "gpus": 8}).json()
        cid = submitted["id"]
        queued = wait_for(lambda: (s := c.get(f"/v1/containers/{cid}").json())["message"] and s)
        assert queued["message"].startswith("waiting for tenancy 'story' to be Ready")
        mark_tenancy_ready(k8s, "story")
        pod = f"gpucaas-{cid}"
        wait_for(lambda: get_pod(k8s, "tenant-story", pod))
        set_pod_status(
            k8s,
            "tenant-story",
            pod,
            UNSCHEDULABLE | {"conditions": [UNSCHEDULABLE["conditions"][0] | {"lastTransitionTime": at(1)}]},
        )
        waiting = wait_for(
            lambda: (
                (s := c.get(f"/v1/containers/{cid}").json())["message"]
                and s["message"].startswith("waiting for GPUs")
                and s
            )
        )
        assert waiting["status"] == "Pending" and waiting["exit_code"] is None
        bind_pod(k8s, "tenant-story", pod, "gpu-node-1")
        _post_event(k8s, "tenant-story", pod, "Pulling", f'Pulling image "{IMAGE}"', at(5))
        _post_event(k8s, "tenant-story", pod, "Pulled", f'Successfully pulled image "{IMAGE}"', at(30))
        set_pod_status(
            k8s,
            "tenant-story",
            pod,
            {
                "phase": "Failed",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(2)}],
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": False,
                        "restartCount": 0,
                        "image": IMAGE,
                        "imageID": "",
                        "state": {
                            "terminated": {
                                "exitCode": 137,
                                "reason": "OOMKilled",
                                "startedAt": at(31),
                                "finishedAt": at(600),
                            }
                        },
                    }
                ],
            },
        )
        done = wait_for(lambda: (s := c.get(f"/v1/containers/{cid}").json())["status"] == "Failed" and s)
        assert done["exit_code"] == 137 and done["message"].startswith("OOMKilled: the container ran out of memory")
        timeline = c.get(f"/v1/containers/{cid}/events").json()
        kinds = [e["kind"] for e in timeline["data"]]
        assert kinds == ["queued", "scheduled", "pulling", "pulled", "running", "finished"], timeline
        assert timeline["data"][1]["message"] == "on node gpu-node-1"
        assert timeline["data"][-1]["message"].startswith("Failed: OOMKilled")
        # after the pod is gone, the API's own part of the story stays
        kc.CoreV1Api(k8s).delete_namespaced_pod(pod, "tenant-story")
        wait_for(lambda: get_pod(k8s, "tenant-story", pod) is None)
        after = c.get(f"/v1/containers/{cid}/events").json()
        assert [e["kind"] for e in after["data"]] == ["queued", "finished"]
    with api.client() as admin:
        other = new_tenancy(admin, "nosy")
    with api.client(other) as nosy:
        theirs = nosy.get(f"/v1/containers/{cid}/events")
        missing = nosy.get("/v1/containers/00000000000000000000/events")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(cid, "X") == missing.json()["detail"].replace("00000000000000000000", "X")


def test_a_full_quota_keeps_the_container_queued_saying_so(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "full")
    mark_tenancy_ready(k8s, "full")
    core = kc.CoreV1Api(k8s)
    core.create_namespaced_resource_quota(
        "tenant-full", {"metadata": {"name": "full"}, "spec": {"hard": {"pods": "0"}}}
    )
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": IMAGE}).json()["id"]
        waiting = wait_for(
            lambda: (
                (s := c.get(f"/v1/containers/{cid}").json())["message"]
                and s["message"].startswith("waiting for quota")
                and s
            )
        )
        assert waiting["status"] == "Queued" and "exceeded quota" in waiting["message"]
        core.delete_namespaced_resource_quota("full", "tenant-full")
        assert wait_for(lambda: get_pod(k8s, "tenant-full", f"gpucaas-{cid}"))
        assert wait_for(lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Pending")


def test_a_dra_drivers_partition_event_is_the_activation_in_the_timeline() -> None:
    """In the DRA mode the driver's PartitionActivated Event marks the activation; the lease's
    own ``holder.since`` then adds no second entry."""
    from services.api.domain.events import timeline

    container = {"created_at": "2026-11-22T10:00:00Z", "gpus": 2, "status": "Running"}
    event = {
        "reason": "PartitionActivated",
        "message": "2 GPU(s) allocated on n1: a, b (claim c, partition p)",
        "lastTimestamp": "2026-11-22T10:00:03Z",
    }
    lease = {
        "spec": {"node": "n1", "pciAddress": "a"},
        "status": {"holder": {"since": "2026-11-22T10:00:03Z", "pod": "p", "namespace": "tenant-t"}},
    }
    entries = timeline(container=container, pod_events=[event], leases=[lease])
    assert [(e["kind"], e["source"]) for e in entries] == [("queued", "api"), ("partition-activated", "kubernetes")]
    assert entries[1]["message"] == event["message"]
    # without the Event (device-plugin mode on a real cluster) the lease still tells it
    only_lease = timeline(container=container, leases=[lease])
    assert [e["kind"] for e in only_lease] == ["queued", "partition-activated"]


def test_a_finished_containers_activation_is_read_from_its_leases_history() -> None:
    """Once the pod ends its GPUs' leases move the holder into ``history``; a finished
    container's timeline still shows when its partition was activated, and another pod's
    turn on the same GPU is not it."""
    from services.api.domain.events import leases_of_pod, timeline

    released = {
        "spec": {"node": "n1", "pciAddress": "0000:18:00.0"},
        "status": {
            "state": "Free",
            "history": [
                {
                    "namespace": "tenant-t",
                    "pod": "gpucaas-a",
                    "from": "2026-11-22T10:00:03Z",
                    "to": "2026-11-22T10:05:00Z",
                },
                {
                    "namespace": "tenant-u",
                    "pod": "gpucaas-b",
                    "from": "2026-11-22T10:06:00Z",
                    "to": "2026-11-22T10:07:00Z",
                },
            ],
        },
    }
    held_now = {
        "spec": {"node": "n1", "pciAddress": "0000:38:00.0"},
        "status": {
            "state": "Leased",
            "holder": {"namespace": "tenant-t", "pod": "gpucaas-c", "since": "2026-11-22T10:08:00Z"},
        },
    }
    mine = leases_of_pod([released, held_now], "tenant-t", "gpucaas-a")
    assert [ls["status"]["holder"]["since"] for ls in mine] == ["2026-11-22T10:00:03Z"]
    assert leases_of_pod([released, held_now], "tenant-t", "gpucaas-c") == [held_now]
    assert leases_of_pod([released], "tenant-t", "gpucaas-z") == []
    container = {
        "created_at": "2026-11-22T10:00:00Z",
        "gpus": 1,
        "status": "Succeeded",
        "finished_at": "2026-11-22T10:05:00Z",
    }
    kinds = [e["kind"] for e in timeline(container=container, leases=mine)]
    assert kinds == ["queued", "partition-activated", "finished"]


def test_a_partition_taken_back_for_a_guarantee_is_a_preemption() -> None:
    """The partition check withdraws a running pod's admission to give its whole NVLink partition
    back to guaranteed work: Kueue stops the pod for the admission check, and the check's own
    condition, set on the pod before, says it was a preemption and why (naming no tenancy)."""
    stop = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToAdmissionCheck"}
    stop["message"] = "At least one admission check is false"
    told = {
        "type": kueue.PREEMPTED_FOR_GUARANTEE_CONDITION,
        "status": "True",
        "reason": "PartitionReclaimed",
        "message": "Preempted to give a whole NVLink partition on gpu-a back to guaranteed work, "
        "due to reclamation within the cohort",
    }
    taken_back = _pod({"phase": "Failed", "conditions": [told, stop]})
    assert reasons.preempted_by_queue(taken_back)
    assert reasons.stopped_by_queue(taken_back) == "Preempted by the queue: another tenancy claimed its guaranteed GPUs"
    assert pods.container_status_from_pod(taken_back).reason == "Preempted"
    own = _pod(
        {
            "phase": "Failed",
            "conditions": [{**told, "message": "Preempted ... due to prioritization in the ClusterQueue"}, stop],
        }
    )
    assert (
        reasons.stopped_by_queue(own)
        == "Preempted by the queue: a higher-priority container of your tenancy needed its GPUs"
    )
    # the check's withdrawal without its condition (any other cause) is no preemption
    withdrawn = _pod({"phase": "Failed", "conditions": [stop]})
    assert not reasons.preempted_by_queue(withdrawn)
    assert reasons.stopped_by_queue(withdrawn) == "Stopped by the queue: its admission was withdrawn"
    # nor is the condition alone, while the pod runs on
    assert not reasons.preempted_by_queue(_pod({"phase": "Running", "conditions": [told]}))
