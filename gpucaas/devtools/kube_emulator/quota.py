"""ResourceQuota admission and usage, as the API server's quota plugin and controller do.

Pure functions over wire dicts: :func:`parse_quantity`, :func:`usage` (what one object
consumes of each quota'd resource) and :func:`admit` (the 403 a create would get). The
store calls them for every create in a namespace with quotas and recomputes each
quota's ``status.used`` (``status.hard`` = ``spec.hard``) after every change there.

Tracked: ``pods``/``count/pods``, ``requests.cpu``/``cpu``, ``requests.memory``/``memory``,
``limits.cpu``, ``limits.memory``, ``requests.<extended>`` (``requests.nvidia.com/gpu``),
``requests.storage`` and ``persistentvolumeclaims``, the legacy object counts (``services``,
``configmaps``, ``secrets``, ``resourcequotas``, ``replicationcontrollers``) and
``count/<resource>[.<group>]``. Terminal (Succeeded/Failed) and deleting pods do not count.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIXES = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_LEGACY_COUNTS = {
    "pods": ("", "pods"), "services": ("", "services"), "configmaps": ("", "configmaps"),
    "secrets": ("", "secrets"), "persistentvolumeclaims": ("", "persistentvolumeclaims"),
    "resourcequotas": ("", "resourcequotas"), "replicationcontrollers": ("", "replicationcontrollers"),
}
_COMPUTE = ("cpu", "memory")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2Gi``, ``8``) as a Decimal; ValueError when malformed."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    try:
        return Decimal(m.group(1)) * _SUFFIXES[m.group(2) or ""]
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {value!r}") from exc


def format_quantity(value: Decimal, like: str | None = None) -> str:
    """Canonical text: a binary suffix when ``like`` used one and it divides exactly, ``m`` for fractions."""
    if like and re.search(r"[KMGTPE]i$", str(like)) and value == value.to_integral_value() and value:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _SUFFIXES[suffix]
            if value % unit == 0:
                return f"{int(value / unit)}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return str(value)


def _pod_resources(pod: dict[str, Any], kind: str) -> dict[str, Decimal]:
    """Effective requests or limits of a pod: sum of containers, at least the largest init container."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        values = dict(res.get(kind) or {})
        if kind == "requests":  # requests default to limits
            for k, v in (res.get("limits") or {}).items():
                values.setdefault(k, v)
        return {k: parse_quantity(v) for k, v in values.items()}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in ((spec.get("overhead") or {}).items()):
        total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    return total


def counts(pod_or_obj: dict[str, Any], key: tuple[str, str]) -> bool:
    """Whether an object counts against quota at all (terminal and deleting pods do not)."""
    if key == ("", "pods"):
        if (pod_or_obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        if (pod_or_obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
    return True


def usage(obj: dict[str, Any], key: tuple[str, str], tracked: list[str]) -> dict[str, Decimal]:
    """What ``obj`` (of resource ``key``) uses of each ``tracked`` quota resource."""
    out: dict[str, Decimal] = {}
    if not counts(obj, key):
        return out
    group, plural = key
    count_name = f"count/{plural}" + (f".{group}" if group else "")
    requests = limits = None
    for name in tracked:
        if name == count_name or _LEGACY_COUNTS.get(name) == key:
            out[name] = Decimal(1)
        elif key == ("", "pods") and (name.startswith("requests.") or name in _COMPUTE):
            requests = requests if requests is not None else _pod_resources(obj, "requests")
            res = name[len("requests."):] if name.startswith("requests.") else name
            if res in requests:
                out[name] = requests[res]
        elif key == ("", "pods") and name.startswith("limits."):
            limits = limits if limits is not None else _pod_resources(obj, "limits")
            res = name[len("limits."):]
            if res in limits:
                out[name] = limits[res]
        elif key == ("", "persistentvolumeclaims") and name == "requests.storage":
            req = (((obj.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
            if req is not None:
                out[name] = parse_quantity(req)
    return out


def missing_compute(obj: dict[str, Any], tracked: list[str]) -> list[str]:
    """Compute resources a quota tracks that some container does not state (such pods are refused)."""
    missing = []
    containers = (obj.get("spec") or {}).get("containers") or []
    for name in tracked:
        if name in ("requests.cpu", "cpu", "requests.memory", "memory"):
            res = name.split(".")[-1]
            kinds = ("requests", "limits")  # requests default to limits
        elif name in ("limits.cpu", "limits.memory"):
            res = name.split(".")[-1]
            kinds = ("limits",)
        else:
            continue
        for c in containers:
            resources = c.get("resources") or {}
            if not any(res in (resources.get(k) or {}) for k in kinds):
                missing.append(name)
                break
    return missing
