"""Comparing a desired object with the live one: "exists as specified" (pure).

Used by the planner (Ready means every child matches) and by the Kubernetes
adapter (replace only what differs), so it sits below both.

Quantities are compared as quantities: an API server stores ``resource.Quantity``
fields in canonical form (``1024Gi`` reads back as ``1Ti``, ``1000m`` as ``1``;
k8s.io/apimachinery/pkg/api/resource, "Quantity ... serialized in canonical
form"), so a string comparison would see drift on every pass. The values of the
maps that hold quantities in the kinds the controller writes (PV
``spec.capacity``, PVC ``spec.resources.requests|limits``, ResourceQuota
``spec.hard``, LimitRange ``spec.limits[].default|defaultRequest|max|min|
maxLimitRequestRatio``) are parsed with ``kubernetes.utils.parse_quantity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.utils import parse_quantity

#: Keys whose mapping value holds resource name -> Quantity (in the kinds the controller writes).
QUANTITY_MAPS = frozenset(
    {"capacity", "requests", "limits", "hard", "default", "defaultRequest", "max", "min", "maxLimitRequestRatio"}
)


#: Keys whose value is one Quantity (Kueue's ClusterQueue quotas and fair-sharing weight).
QUANTITY_SCALARS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit", "weight"})

#: Values Go's ``omitempty`` leaves out of a built-in object's JSON.
ZERO_VALUES: tuple[Any, ...] = (False, "", 0, None, {}, [])


def same_quantity(desired: Any, observed: Any) -> bool:
    """True when both are the same quantity (``1024Gi`` == ``1Ti``); equal values otherwise."""
    if desired == observed:
        return True
    try:
        return bool(parse_quantity(desired) == parse_quantity(observed))
    except (ValueError, TypeError):
        return False


def is_subset(desired: Any, observed: Any, *, quantities: bool = False) -> bool:
    """True when every field of ``desired`` is present and equal in ``observed``.

    Lists must have the same length and match element-wise; fields the server
    adds (defaults, status, resourceVersion, a bound PV's claimRef.uid) are ignored.
    A desired zero value (``false``, ``""``, ``0``, empty) matches an absent field: the
    built-in kinds' Go types drop such fields (``omitempty``), so a PV's ``nfs.readOnly:
    false`` or ``storageClassName: ""`` never reads back.
    ``quantities``: the leaves are resource quantities (see the module docstring).
    """
    if isinstance(desired, Mapping):
        return isinstance(observed, Mapping) and all(
            (v in ZERO_VALUES and k not in observed)
            or k in observed
            and is_subset(
                v,
                observed[k],
                quantities=quantities
                or (k in QUANTITY_MAPS and isinstance(v, Mapping))
                or (k in QUANTITY_SCALARS and isinstance(v, str)),
            )
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(desired) == len(observed)
            and all(is_subset(d, o, quantities=quantities) for d, o in zip(desired, observed, strict=True))
        )
    if quantities:
        return same_quantity(desired, observed)
    return desired == observed


def matches(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """True when ``observed`` is the ``desired`` object as specified (spec, labels, owners)."""
    if observed is None or (observed.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if desired.get("kind") == "PersistentVolume" and (observed.get("status") or {}).get("phase") == "Released":
        # its claim was deleted (and is being recreated): the claimRef still names the old
        # claim's uid, so the new claim would never bind; replacing it clears the uid
        return False
    if desired.get("kind") == "ResourceQuota" and set((desired.get("spec") or {}).get("hard") or {}) != set(
        (observed.get("spec") or {}).get("hard") or {}
    ):
        # a limit the Tenancy no longer wants (the GPU cap once Kueue holds it) is drift too
        return False
    if desired.get("kind") == "ClusterQueue" and ("admissionChecksStrategy" in (desired.get("spec") or {})) != (
        "admissionChecksStrategy" in (observed.get("spec") or {})
    ):
        # an admission check turned off must go: a check nobody answers would hold every Workload
        return False
    meta_d, meta_o = desired.get("metadata") or {}, observed.get("metadata") or {}
    for key in ("labels", "ownerReferences"):
        if key in meta_d and not is_subset(meta_d[key], meta_o.get(key)):
            return False
    return all(is_subset(v, observed.get(k)) for k, v in desired.items() if k not in ("metadata", "apiVersion", "kind"))
