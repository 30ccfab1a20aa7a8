"""The GPULease state machine, as pure functions over the lease's ``status`` dict.

    Free --allocated--> Leased --pod gone--> Releasing --check requested--> Checking
    Checking --passed--> Free
    Checking --failed / device vanished / out of attempts--> Quarantined
    any --admin quarantine--> Quarantined --admin release--> Checking (or Free when forced)

Every transition returns a new status: the state, a reason and message, the
``Ready``/``Quarantined`` conditions with their transition times, and, when a
tenant's lease ends, one bounded history entry. Illegal transitions raise
``IllegalTransition`` so a caller never writes a state the machine forbids.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

HISTORY_LIMIT = 32


class LeaseState(StrEnum):
    FREE = "Free"
    LEASED = "Leased"
    RELEASING = "Releasing"
    CHECKING = "Checking"
    QUARANTINED = "Quarantined"


#: States in which the device plugin may advertise the GPU as Healthy.
ALLOCATABLE_STATES = frozenset({LeaseState.FREE, LeaseState.LEASED})


class IllegalTransition(ValueError):
    """The event is not allowed in the lease's current state."""


@dataclass(frozen=True)
class Holder:
    pod: str
    namespace: str
    tenancy: str | None
    pod_uid: str | None = None


def now_iso(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_of(status: dict[str, Any] | None) -> LeaseState:
    raw = (status or {}).get("state") or LeaseState.FREE
    return LeaseState(raw)


def _set_condition(status: dict[str, Any], ctype: str, value: bool, reason: str, message: str, when: str) -> None:
    conds = [c for c in status.get("conditions", []) if c.get("type") != ctype]
    old = next((c for c in status.get("conditions", []) if c.get("type") == ctype), None)
    new_status = "True" if value else "False"
    changed = old is None or old.get("status") != new_status
    conds.append(
        {
            "type": ctype,
            "status": new_status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": when if old is None or changed else old.get("lastTransitionTime", when),
        }
    )
    status["conditions"] = sorted(conds, key=lambda c: c["type"])


def _moved(
    status: dict[str, Any] | None, state: LeaseState, reason: str, message: str, now: dt.datetime | None
) -> dict[str, Any]:
    new = copy.deepcopy(status or {})
    when = now_iso(now)
    new["state"] = str(state)
    new["reason"] = reason
    new["message"] = message
    _set_condition(new, "Allocatable", state in ALLOCATABLE_STATES, reason, message, when)
    _set_condition(new, "Quarantined", state is LeaseState.QUARANTINED, reason, message, when)
    return new


def _require(status: dict[str, Any] | None, *allowed: LeaseState, event: str) -> LeaseState:
    current = state_of(status)
    if current not in allowed:
        names = ", ".join(str(a) for a in allowed)
        raise IllegalTransition(f"{event} is not allowed in state {current} (only from {names})")
    return current


def initial(now: dt.datetime | None = None) -> dict[str, Any]:
    return _moved({}, LeaseState.FREE, "Discovered", "GPU discovered on the node; never leased", now)


def allocated(status: dict[str, Any] | None, holder: Holder, now: dt.datetime | None = None) -> dict[str, Any]:
    """The kubelet gave the GPU to a pod."""
    current = _require(status, LeaseState.FREE, LeaseState.LEASED, event="allocation")
    if current is LeaseState.LEASED:
        held = (status or {}).get("holder") or {}
        if (held.get("namespace"), held.get("pod")) == (holder.namespace, holder.pod):
            return copy.deepcopy(status or {})
        raise IllegalTransition(
            f"GPU is leased to {held.get('namespace')}/{held.get('pod')}; "
            f"cannot lease it to {holder.namespace}/{holder.pod} before it is released and checked"
        )
    new = _moved(status, LeaseState.LEASED, "Allocated", f"allocated to pod {holder.namespace}/{holder.pod}", now)
    new["holder"] = {
        "pod": holder.pod,
        "namespace": holder.namespace,
        "tenancy": holder.tenancy,
        "podUID": holder.pod_uid,
        "since": now_iso(now),
    }
    new["holder"] = {k: v for k, v in new["holder"].items() if v is not None}
    return new


def released(status: dict[str, Any] | None, why: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """The holder pod finished or was deleted: record the tenancy in history, await the check."""
    _require(status, LeaseState.LEASED, event="release")
    new = _moved(status, LeaseState.RELEASING, "PodGone", why, now)
    held = new.pop("holder", {}) or {}
    entry = {
        "tenancy": held.get("tenancy"),
        "namespace": held.get("namespace"),
        "pod": held.get("pod"),
        "from": held.get("since"),
        "to": now_iso(now),
    }
    history = [*new.get("history", []), {k: v for k, v in entry.items() if v is not None}]
    new["history"] = history[-HISTORY_LIMIT:]
    return new


def check_started(status: dict[str, Any] | None, now: dt.datetime | None = None) -> dict[str, Any]:
    """The controller asks the node to check the GPU (again, on a retry)."""
    current = _require(status, LeaseState.RELEASING, LeaseState.CHECKING, event="check request")
    attempts = int(((status or {}).get("lastCheck") or {}).get("attempts", 0)) if current is LeaseState.CHECKING else 0
    new = _moved(
        status,
        LeaseState.CHECKING,
        "CheckRequested",
        f"firmware and binding check requested (attempt {attempts + 1})",
        now,
    )
    new["lastCheck"] = {"attempts": attempts + 1, "at": now_iso(now)}
    return new


def check_passed(
    status: dict[str, Any] | None, rom_sha256: str, rom_version: str | None, now: dt.datetime | None = None
) -> dict[str, Any]:
    _require(status, LeaseState.CHECKING, event="check result")
    new = _moved(
        status,
        LeaseState.FREE,
        "CheckPassed",
        f"firmware matches the golden image (version {rom_version or 'unknown'}); GPU is free",
        now,
    )
    new["lastCheck"] = {
        **(new.get("lastCheck") or {}),
        "result": "Passed",
        "romSha256": rom_sha256,
        "romVersion": rom_version or "",
        "reason": "CheckPassed",
        "at": now_iso(now),
    }
    _stamp_last_history(new, "Passed")
    return new


def check_failed(
    status: dict[str, Any] | None,
    reason: str,
    message: str,
    rom_sha256: str | None = None,
    rom_version: str | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    _require(status, LeaseState.CHECKING, event="check result")
    new = _moved(status, LeaseState.QUARANTINED, reason, message, now)
    check = {**(new.get("lastCheck") or {}), "result": "Failed", "reason": reason, "at": now_iso(now)}
    if rom_sha256:
        check["romSha256"] = rom_sha256
    if rom_version:
        check["romVersion"] = rom_version
    new["lastCheck"] = check
    _stamp_last_history(new, f"Failed: {reason}")
    return new


def admin_quarantine(status: dict[str, Any] | None, reason: str, now: dt.datetime | None = None) -> dict[str, Any]:
    current = state_of(status)
    if current is LeaseState.LEASED:
        held = (status or {}).get("holder") or {}
        raise IllegalTransition(
            f"GPU is in use by {held.get('namespace')}/{held.get('pod')}; cancel that container first"
        )
    return _moved(status, LeaseState.QUARANTINED, "QuarantinedByAdmin", reason or "quarantined by an admin", now)


def admin_release(
    status: dict[str, Any] | None, skip_check: bool = False, now: dt.datetime | None = None
) -> dict[str, Any]:
    """An admin clears a quarantine: the GPU is checked again unless ``skip_check``."""
    _require(status, LeaseState.QUARANTINED, event="admin release")
    if skip_check:
        return _moved(status, LeaseState.FREE, "ReleasedByAdmin", "quarantine cleared by an admin without a check", now)
    new = _moved(status, LeaseState.RELEASING, "ReleasedByAdmin", "quarantine cleared by an admin; re-checking", now)
    new.pop("lastCheck", None)
    return new


def _stamp_last_history(status: dict[str, Any], result: str) -> None:
    history = status.get("history") or []
    if history and "check" not in history[-1]:
        history[-1] = {**history[-1], "check": result}
