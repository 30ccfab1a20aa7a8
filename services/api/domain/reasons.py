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
  pod that outlives ``activeDeadlineSeconds``, i.e. the tenant's ``timeout_seconds``).

Kubernetes API reference: PodStatus, PodCondition, ContainerStateWaiting/Terminated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def explain(pod: Mapping[str, Any], *, container: str, image: str, timeout: int | None = None) -> Outcome:
    """The message and exit code the API shows for the container running in ``pod``."""
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
                why = cond.get("message") or cond.get("reason") or "no node fits"
                return Outcome(f"waiting for GPUs: {why}", None)
    message = status.get("message") or pod_reason
    return Outcome(message, None)
