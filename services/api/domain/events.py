"""A container's timeline, assembled from what the API, its pod and the cluster recorded (pure).

Entries come from: the API's own row (queued, finished/cancelled: these stay after the pod
is gone); the pod's status (``PodScheduled`` condition, container start and end);
core/v1 Events about the pod (scheduler ``Scheduled``/``FailedScheduling``, kubelet
``Pulling``/``Pulled``/``Failed``/``BackOff``/``Started``/``Killing``; the DRA driver's
``PartitionActivated``); and the GPULeases
the device plugin writes when it allocates the pod's GPUs, i.e. when their NVLink
partition was activated (``status.holder.since``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

# kubelet/scheduler Event reason -> timeline kind
EVENT_KINDS = {
    "Scheduled": "scheduled",
    # the kubelet got the devices from the plugin (Allocate activated the partition)
    "DevicesAllocated": "partition-activated",
    "PartitionActivated": "partition-activated",  # the DRA driver prepared the pod's claim: its partition is active
    "FailedScheduling": "waiting",
    "Pulling": "pulling",
    "Pulled": "pulled",
    "Failed": "failed",
    "BackOff": "waiting",
    "ErrImageNeverPull": "failed",
    "Created": "created",
    "Started": "running",
    "Killing": "stopping",
    "DeadlineExceeded": "stopping",
    "RuntimeWithoutVM": "runtime",  # a sandbox node: the Kata handler runs runc there (no VM boots)
}


def leases_of_pod(leases: Iterable[Mapping[str, Any]], namespace: str, pod: str) -> list[dict[str, Any]]:
    """The GPULeases the pod holds or held, each as held by it since its allocation.

    A lease names its holder only until the pod ends; then the holder moves into the lease's
    ``history`` (``from``/``to``), where a finished container's activation is still read."""
    out: list[dict[str, Any]] = []
    for ls in leases:
        status = ls.get("status") or {}
        holder = status.get("holder") or {}
        if (holder.get("namespace"), holder.get("pod")) == (namespace, pod):
            out.append(dict(ls))
            continue
        for entry in reversed(status.get("history") or []):
            if (entry.get("namespace"), entry.get("pod")) == (namespace, pod) and entry.get("from"):
                held = {"pod": pod, "namespace": namespace, "since": entry["from"]}
                out.append({**ls, "status": {**status, "holder": held}})
                break
    return out


def _iso(value: Any) -> str | None:
    """One format for every stamp (Kubernetes sends ``Z``, ``+00:00`` and MicroTime
    fractions), so that the timeline sorts by time and not by spelling."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def _entry(time: Any, kind: str, message: str, source: str) -> dict[str, Any] | None:
    stamp = _iso(time)
    if stamp is None:
        return None
    return {"time": stamp, "kind": kind, "message": message, "source": source}


def timeline(
    *,
    container: Mapping[str, Any],
    pod: Mapping[str, Any] | None = None,
    pod_events: Iterable[Mapping[str, Any]] = (),
    leases: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Entries ``{time, kind, message, source}`` in time order (``container`` is the API row as a dict)."""
    out: list[dict[str, Any] | None] = [
        _entry(container.get("created_at"), "queued", f"accepted with {container.get('gpus')} GPU(s)", "api")
    ]
    seen_scheduled = seen_activated = False
    for ev in pod_events:
        kind = EVENT_KINDS.get(str(ev.get("reason")))
        if kind is None:
            continue
        when = (
            ev.get("lastTimestamp")
            or ev.get("eventTime")
            or ev.get("firstTimestamp")
            or (ev.get("metadata") or {}).get("creationTimestamp")
        )
        count = ev.get("count") or 1
        text = str(ev.get("message") or ev.get("reason"))
        out.append(_entry(when, kind, text + (f" (x{count})" if count > 1 else ""), "kubernetes"))
        seen_scheduled = seen_scheduled or kind == "scheduled"
        seen_activated = seen_activated or kind == "partition-activated"
    if pod is not None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") != "PodScheduled":
                continue
            if cond.get("status") == "True" and not seen_scheduled:
                out.append(
                    _entry(cond.get("lastTransitionTime"), "scheduled", f"on node {spec.get('nodeName') or '?'}", "pod")
                )
            elif cond.get("status") == "False":
                out.append(
                    _entry(
                        cond.get("lastTransitionTime"),
                        "waiting",
                        str(cond.get("message") or cond.get("reason") or "not scheduled yet"),
                        "pod",
                    )
                )
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state:
                out.append(_entry((state["running"] or {}).get("startedAt"), "running", "the container started", "pod"))
            if "terminated" in state:
                t = state["terminated"] or {}
                out.append(_entry(t.get("startedAt"), "running", "the container started", "pod"))
        if status.get("startTime") and not status.get("containerStatuses") and status.get("phase") == "Running":
            out.append(_entry(status.get("startTime"), "running", "the container started", "pod"))
    held = [ls for ls in leases if ((ls.get("status") or {}).get("holder") or {}).get("since")]
    if held and not seen_activated:  # the node's own Event says it already
        since = min(ls["status"]["holder"]["since"] for ls in held)
        nodes = sorted({(ls.get("spec") or {}).get("node", "?") for ls in held})
        pcis = sorted((ls.get("spec") or {}).get("pciAddress", "?") for ls in held)
        out.append(
            _entry(
                since,
                "partition-activated",
                f"{len(held)} GPU(s) allocated on {', '.join(nodes)}: {', '.join(pcis)}",
                "device-plugin",
            )
        )
    status_name = container.get("status")
    if status_name in ("Succeeded", "Failed", "Cancelled"):
        text = container.get("message") or status_name
        if container.get("exit_code") is not None and "exit code" not in str(text):
            text = f"{text} (exit code {container['exit_code']})"
        out.append(
            _entry(
                container.get("finished_at"),
                "finished" if status_name != "Cancelled" else "cancelled",
                f"{status_name}: {text}",
                "api",
            )
        )
    entries = [e for e in out if e is not None]
    # drop exact duplicates (a terminated state and a Started event may say the same)
    unique: list[dict[str, Any]] = []
    for e in entries:
        if e not in unique:
            unique.append(e)
    # Nothing happens to a container before it was accepted, but Kubernetes stamps (and the
    # GPU leases' ``holder.since``, written the same way) have whole-second precision
    # (metav1.Time serialises RFC 3339 without fractions), so a lease taken 0.4 s after an
    # acceptance at hh:mm:ss.6 reads hh:mm:ss, before it; a node clock behind the API's does
    # the same. Such stamps are shown at the acceptance time, keeping the sources' order.
    start = unique[0]["time"] if unique and unique[0]["kind"] == "queued" else None
    if start is not None:
        for e in unique[1:]:
            if e["time"] < start:
                e["time"] = start
    return sorted(unique, key=lambda e: e["time"])
