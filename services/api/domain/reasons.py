"""Why a container waits or how it ended, in the tenant's terms, read from its pod (pure).

Sources, in the order a tenant cares about them:

* the pod's ``PodScheduled`` condition with ``status: False`` (kube-scheduler and the
  gpucaas extender write ``reason: Unschedulable`` and a message such as ``0/3 nodes
  are available: 3 Insufficient nvidia.com/gpu``) → ``waiting for GPUs: ...``;
* the main container's ``state.waiting`` (kubelet reasons ``ErrImagePull``,
  ``ImagePullBackOff``, ``CreateContainerConfigError``...). A pull refused by the
  registry (401/403, "unauthorized", "denied") reads ``ImagePullBackOff: unauthorized
  for <image>`` with a hint to register a credential for that registry;
* ``state.terminated`` (``exitCode``, ``reason``: ``Completed``, ``Error``,
  ``OOMKilled``) and the pod's own ``reason`` ``DeadlineExceeded`` (the kubelet ends a
  pod that outlives ``activeDeadlineSeconds``, i.e. the tenant's ``timeout_seconds``);
* with queueing by Kueue, a pod its webhook gated and it has not admitted (``PodScheduled``
  reason ``SchedulingGated``, a ``kueue.x-k8s.io/`` gate) → ``waiting in the queue: ...``;
  the condition ``TerminationTarget`` Kueue puts on a pod it stops
  (its Workload evicted, preemption most often) just before deleting it → ``Preempted by the
  queue: <cause>``, ahead of how the container ended. Kueue's own message names the
  preempting workload and the queues it came through (another tenancy's): only the cause is
  told.

Kubernetes API reference: PodStatus, PodCondition, ContainerStateWaiting/Terminated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import kueue

PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
_AUTH_WORDS = ("unauthorized", "401", "403", "denied", "authentication required", "forbidden", "no basic auth")


@dataclass(frozen=True)
class Outcome:
    message: str | None
    exit_code: int | None


def registry_of(image: str) -> str:
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _waiting(state: Mapping[str, Any], image: str) -> str | None:
    reason, detail = state.get("reason"), state.get("message")
    if reason in PULL_REASONS:
        text = (detail or "").lower()
        if any(w in text for w in _AUTH_WORDS):
            return (
                f"{reason}: unauthorized for {image} (image pull failed; register a credential for "
                f"{registry_of(image)} with POST /v1/registry-credentials)"
            )
        if "not found" in text or "manifest unknown" in text:
            return f"{reason}: {image} not found (image pull failed)"
        return f"{reason}: image pull failed for {image}" + (f": {detail}" if detail else "")
    if reason and detail:
        return f"{reason}: {detail}"
    return reason or detail


def _terminated(state: Mapping[str, Any], pod_reason: str | None, timeout: int | None) -> Outcome:
    code = state.get("exitCode")
    reason = state.get("reason")
    if pod_reason == "DeadlineExceeded":
        limit = f" ({timeout} s)" if timeout else ""
        return Outcome(f"timeout_seconds exceeded{limit}: the container was stopped", code)
    if reason == "OOMKilled":
        return Outcome(f"OOMKilled: the container ran out of memory (exit code {code}); ask for more memory", code)
    if reason == "ContainerCannotRun" or reason == "StartError":
        return Outcome(f"{reason}: {state.get('message') or 'the container could not start'}", code)
    if code is not None:
        word = "finished" if code == 0 else "failed"
        return Outcome(f"{reason or 'Terminated'}: {word} with exit code {code}", code)
    return Outcome(reason, None)


#: the condition Kueue's plain-pod integration sets on a pod it stops, before deleting it
QUEUE_STOP_CONDITION = "TerminationTarget"
#: what a tenant is told for each of Kueue's preemption causes (the end of its message, "due to
#: ..."), the more specific first
_PREEMPTION_CAUSES = (
    ("while borrowing", "another tenancy claimed the guaranteed GPUs it was borrowing"),
    ("reclamation within the cohort", "another tenancy claimed its guaranteed GPUs"),
    ("fair sharing within the cohort", "fair sharing gave its GPUs to a tenancy using less than its share"),
    ("prioritization in the clusterqueue", "a higher-priority container of your tenancy needed its GPUs"),
)


#: the container's ``reason`` when the queue gave its GPUs to other work
PREEMPTED = "Preempted"
#: how a container whose pod was deleted before it ran to its end is told
POD_DELETED = "pod deleted"
#: a pod Kueue's webhook gated (queueing by Kueue) and has not admitted yet
QUEUE_GATED = "waiting in the queue: its GPUs are not reserved yet (where it stands: queue)"


def _queue_gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(str(g.get("name", "")).startswith(f"{kueue.GROUP}/") for g in gates)


def _true_condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


def _queue_stop(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Why the queue stopped the pod, when it did: Kueue's ``TerminationTarget`` condition, or,
    when Kueue stopped it because the partition check withdrew its admission to give its
    partition back to a guarantee, the check's own condition (which says so)."""
    cond = _true_condition(pod, QUEUE_STOP_CONDITION)
    if cond is None:
        return None
    if str(cond.get("reason") or "").endswith("DueToAdmissionCheck"):
        return _true_condition(pod, kueue.PREEMPTED_FOR_GUARANTEE_CONDITION) or cond
    return cond


def _is_preemption(cond: Mapping[str, Any]) -> bool:
    return "Preempted" in str(cond.get("reason") or "") or str(cond.get("message") or "").startswith("Preempted")


def preempted_by_queue(pod: Mapping[str, Any]) -> bool:
    """True for a pod Kueue stopped to give its GPUs to other work (the container's reason
    becomes ``Preempted``); a withdrawn admission for another cause is not a preemption."""
    cond = _queue_stop(pod)
    return cond is not None and _is_preemption(cond)


def stopped_by_queue(pod: Mapping[str, Any]) -> str | None:
    """``Preempted by the queue: <cause>`` (or ``Stopped by the queue: ...``) for a pod Kueue
    stopped; None for any other pod."""
    cond = _queue_stop(pod)
    if cond is None:
        return None
    if _is_preemption(cond):
        lowered = str(cond.get("message") or "").lower()
        cause = next((told for key, told in _PREEMPTION_CAUSES if key in lowered), "its GPUs went to other work")
        return f"Preempted by the queue: {cause}"
    return "Stopped by the queue: its admission was withdrawn"


def explain(pod: Mapping[str, Any], *, container: str, image: str, timeout: int | None = None) -> Outcome:
    """The message and exit code the API shows for the container running in ``pod``."""
    outcome = _explain(pod, container=container, image=image, timeout=timeout)
    queue_stop = stopped_by_queue(pod)
    if queue_stop is None:
        return outcome
    return Outcome(f"{queue_stop} ({outcome.message})" if outcome.message else queue_stop, outcome.exit_code)


def _explain(pod: Mapping[str, Any], *, container: str, image: str, timeout: int | None) -> Outcome:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    pod_reason = status.get("reason")
    for cs in status.get("containerStatuses") or []:
        if cs.get("name", container) != container:  # the API's pods have one container
            continue
        state = cs.get("state") or {}
        if "terminated" in state:
            return _terminated(state["terminated"] or {}, pod_reason, timeout)
        if "waiting" in state:
            text = _waiting(state["waiting"] or {}, image)
            if text and text not in ("ContainerCreating", "PodInitializing"):
                return Outcome(text, None)
    if pod_reason == "DeadlineExceeded":
        limit = f" ({timeout} s)" if timeout else ""
        return Outcome(f"timeout_seconds exceeded{limit}: the container was stopped", None)
    if phase == "Pending":
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                if cond.get("reason") == "SchedulingGated" and _queue_gated(pod):
                    return Outcome(QUEUE_GATED, None)
                why = cond.get("message") or cond.get("reason") or "no node fits"
                return Outcome(f"waiting for GPUs: {why}", None)
    message = status.get("message") or pod_reason
    if message is None and phase == "Failed" and (pod.get("metadata") or {}).get("deletionTimestamp"):
        # a deleted pod that never ran, ended by Kubernetes itself (PodGC ends an unscheduled
        # one as Failed while a finalizer holds it), says no more than that it was deleted
        return Outcome(POD_DELETED, None)
    return Outcome(message, None)
