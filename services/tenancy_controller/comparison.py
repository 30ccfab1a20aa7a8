"""Comparing a desired object with the live one: "exists as specified" (pure).

Used by the planner (Ready means every child matches) and by the Kubernetes
adapter (replace only what differs), so it sits below both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_subset(desired: Any, observed: Any) -> bool:
    """True when every field of ``desired`` is present and equal in ``observed``.

    Lists must have the same length and match element-wise; fields the server
    adds (defaults, status, resourceVersion, a bound PV's claimRef.uid) are ignored.
    """
    if isinstance(desired, Mapping):
        return isinstance(observed, Mapping) and all(
            k in observed and is_subset(v, observed[k]) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(desired) == len(observed)
            and all(is_subset(d, o) for d, o in zip(desired, observed, strict=True))
        )
    return desired == observed


def matches(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """True when ``observed`` is the ``desired`` object as specified (spec, labels, owners)."""
    if observed is None or (observed.get("metadata") or {}).get("deletionTimestamp"):
        return False
    meta_d, meta_o = desired.get("metadata") or {}, observed.get("metadata") or {}
    for key in ("labels", "ownerReferences"):
        if key in meta_d and not is_subset(meta_d[key], meta_o.get(key)):
            return False
    return all(is_subset(v, observed.get(k)) for k, v in desired.items() if k not in ("metadata", "apiVersion", "kind"))
