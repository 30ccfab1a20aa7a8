"""Canonical ``resource.Quantity`` strings, as the API server stores and returns them.

A real API server decodes every ``Quantity`` field into apimachinery's
``resource.Quantity`` and encodes it again, so ``1024Gi`` reads back as ``1Ti`` and
``1000m`` as ``1``. The value is parsed with the ``kubernetes`` package's
``kubernetes.utils.parse_quantity``; the formatting follows
``k8s.io/apimachinery/pkg/api/resource/quantity.go``:

- ``ParseQuantity``: the format is the suffix's (``Ki``..``Ei`` BinarySI, ``e``/``E``
  DecimalExponent, otherwise DecimalSI); a non-zero amount is rounded up (away from
  zero) to nano precision; a BinarySI amount strictly between 0 and 1 becomes DecimalSI.
- ``CanonicalizeBytes``: zero is ``0``; a BinarySI amount with ``|x| < 1024`` or with a
  fractional part is shown as DecimalSI; BinarySI is written as the largest power of
  1024 that divides it exactly (``AsCanonicalBase1024Bytes``); DecimalSI/DecimalExponent
  drop trailing zeros and bring the exponent down to a multiple of three
  (``AsCanonicalBytes``), with the SI suffix (``n``, ``u``, ``m``, ``""``, ``k``, ``M``,
  ``G``, ``T``, ``P``, ``E``) or ``e<exp>`` past ``E`` / for DecimalExponent.

Which fields are quantities: :data:`QUANTITY_PATHS` (the built-in kinds the project
uses; every map value under those paths is a quantity, as in ``ResourceList``).
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, localcontext
from typing import Any

from kubernetes.utils import parse_quantity

_BINARY = re.compile(r"[KMGTPE]i$")
_EXPONENT = re.compile(r"[eE][-+]?\d+$")
_SI = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BIN = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
_NANO = Decimal("1e-9")
QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def _format_of(text: str) -> str:
    if _BINARY.search(text):
        return "BinarySI"
    if _EXPONENT.search(text):
        return "DecimalExponent"
    return "DecimalSI"


def canonical(value: Any) -> str:
    """The canonical string of quantity ``value`` (raises ``ValueError`` when malformed)."""
    text = str(value).strip()
    if not text:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    amount = Decimal(parse_quantity(text))
    fmt = _format_of(text)
    if amount == 0:
        return "0"
    with localcontext() as ctx:
        ctx.prec = 80
        sign = "-" if amount < 0 else ""
        amount = abs(amount).quantize(_NANO, rounding=ROUND_UP) if abs(amount).as_tuple().exponent < -9 else abs(amount)
        if fmt == "BinarySI" and (amount < 1024 or amount != amount.to_integral_value()):
            fmt = "DecimalSI"
        if fmt == "BinarySI":
            n, power = int(amount), 0
            while n % 1024 == 0 and power < 6:
                n //= 1024
                power += 1
            return f"{sign}{n}{_BIN[power]}"
        digits, exponent = _mantissa(amount)
        shift = exponent % 3  # bring the exponent down to a multiple of three
        digits *= 10 ** shift
        exponent -= shift
        if fmt == "DecimalSI" and exponent in _SI:
            return f"{sign}{digits}{_SI[exponent]}"
        return f"{sign}{digits}" + (f"e{exponent}" if exponent else "")


def _mantissa(amount: Decimal) -> tuple[int, int]:
    """``amount`` as integer digits and a base-ten exponent, trailing zeros removed."""
    t = amount.normalize().as_tuple()
    digits = int("".join(map(str, t.digits)) or "0")
    exponent = int(t.exponent)
    while digits and digits % 10 == 0:
        digits //= 10
        exponent += 1
    return digits, exponent


def value(text: Any) -> Decimal:
    """The amount of a quantity, rounded up to nano precision as ``ParseQuantity`` does."""
    amount = Decimal(parse_quantity(str(text).strip()))
    if amount.as_tuple().exponent < -9:  # type: ignore[operator]
        sign = -1 if amount < 0 else 1
        amount = sign * abs(amount).quantize(_NANO, rounding=ROUND_UP)
    return amount


def same(a: Any, b: Any) -> bool:
    """Whether two quantities are equal as quantities (``1024Gi`` == ``1Ti``)."""
    return value(a) == value(b)


# (group, plural) -> paths of ResourceList maps; "*" walks every item of a list.
_CONTAINER_RESOURCES = ("resources.limits", "resources.requests")
_POD_SPEC = [f"{kind}.*.{r}" for kind in ("containers", "initContainers", "ephemeralContainers")
             for r in _CONTAINER_RESOURCES] + ["overhead", "resources.limits", "resources.requests"]
_TEMPLATE = [f"template.spec.{p}" for p in _POD_SPEC]
QUANTITY_PATHS: dict[tuple[str, str], list[str]] = {
    ("", "pods"): [f"spec.{p}" for p in _POD_SPEC],
    ("", "persistentvolumeclaims"): ["spec.resources.requests", "spec.resources.limits", "status.capacity",
                                     "status.allocatedResources"],
    ("", "persistentvolumes"): ["spec.capacity"],
    ("", "resourcequotas"): ["spec.hard", "status.hard", "status.used"],
    ("", "limitranges"): [f"spec.limits.*.{k}" for k in ("max", "min", "default", "defaultRequest",
                                                         "maxLimitRequestRatio")],
    ("", "nodes"): ["status.capacity", "status.allocatable"],
    ("", "replicationcontrollers"): [f"spec.{p}" for p in _TEMPLATE],
    ("apps", "deployments"): [f"spec.{p}" for p in _TEMPLATE],
    ("apps", "daemonsets"): [f"spec.{p}" for p in _TEMPLATE],
    ("apps", "replicasets"): [f"spec.{p}" for p in _TEMPLATE],
    ("apps", "statefulsets"): [f"spec.{p}" for p in _TEMPLATE] + [
        "spec.volumeClaimTemplates.*.spec.resources.requests", "spec.volumeClaimTemplates.*.spec.resources.limits"],
    ("batch", "jobs"): [f"spec.{p}" for p in _TEMPLATE],
    ("node.k8s.io", "runtimeclasses"): ["overhead.podFixed"],
}


def canonicalise(key: tuple[str, str], obj: dict[str, Any]) -> list[dict[str, str]]:
    """Rewrite the quantity fields of ``obj`` (a built-in of resource ``key``) in place.

    Returns ``Status`` causes for values that are not quantities (the caller refuses the
    object with 400, as the real server's decoder does).
    """
    causes: list[dict[str, str]] = []
    for path in QUANTITY_PATHS.get(key, ()):
        _walk(obj, path.split("."), "", causes)
    return causes


def _walk(node: Any, parts: list[str], where: str, causes: list[dict[str, str]]) -> None:
    if not parts:
        if not isinstance(node, dict):
            return
        for name, value in list(node.items()):
            if value is None:  # JSON null decodes into Go's zero Quantity
                node[name] = "0"
                continue
            try:
                node[name] = canonical(value)
            except (ValueError, ArithmeticError):
                causes.append({"reason": "FieldValueInvalid", "field": f"{where}[{name}]",
                               "message": f"Invalid value: {value!r}: quantities must match the regular expression "
                                          "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"})
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, list):
            for i, item in enumerate(node):
                _walk(item, rest, f"{where}[{i}]", causes)
        return
    if isinstance(node, dict) and head in node:
        _walk(node[head], rest, f"{where}.{head}" if where else head, causes)
