"""Validation of ``resource.k8s.io/v1`` objects, to the limits the API server enforces.

The limits and rules are those stated on the v1 types (k8s.io/api/resource/v1/types.go;
the same texts are the field descriptions of the ``kubernetes`` client's models, e.g.
``V1ResourceSliceSpec``, ``V1Device``, ``V1CounterSet``), for the fields gpucaas and
kubectl use. Wording follows apimachinery's field errors ("Required value", "Too many",
"Invalid value", "Duplicate value"). Not checked: CEL selector compilation and cost,
node selectors' own syntax, device taints' contents, ``firstAvailable`` subrequests.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpucaas.devtools.kube_emulator.errors import field_error
from gpucaas.devtools.kube_emulator.validation import DNS_LABEL, DNS_SUBDOMAIN

MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS_OR_TAINTS = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_BINDING_CONDITIONS = 4
MAX_REQUESTS = 32
MAX_SELECTORS = 32
MAX_STRING_ATTRIBUTE = 64
_QUALIFIED = re.compile(r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?$")
_NODE_CHOICES = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")

Causes = list[dict[str, str]]


def _too_many(path: str, have: int, limit: int) -> dict[str, str]:
    return field_error(path, "FieldValueTooMany", f"Too many: {have}: must have at most {limit} items")


def _required(path: str) -> dict[str, str]:
    return field_error(path, "FieldValueRequired", "Required value")


def _invalid(path: str, value: Any, why: str) -> dict[str, str]:
    return field_error(path, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: {why}")


def _dns_label(path: str, value: Any) -> Causes:
    if not isinstance(value, str) or not value:
        return [_required(path)]
    if len(value) > 63 or not DNS_LABEL.match(value):
        return [_invalid(path, value, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                                      "characters or '-', and must start and end with an alphanumeric character")]
    return []


def _driver(path: str, value: Any) -> Causes:
    if not isinstance(value, str) or not value:
        return [_required(path)]
    if len(value) > 63 or not DNS_SUBDOMAIN.match(value):
        return [_invalid(path, value, "a lowercase RFC 1123 subdomain of at most 63 characters")]
    return []


def _attribute(path: str, value: Any) -> Causes:
    kinds = [k for k in ("int", "bool", "string", "version") if k in (value or {})]
    if len(kinds) != 1:
        return [_invalid(path, value, "exactly one of int, bool, string or version must be set")]
    if kinds[0] in ("string", "version") and len(str(value[kinds[0]])) > MAX_STRING_ATTRIBUTE:
        return [field_error(f"{path}.{kinds[0]}", "FieldValueTooLong",
                            f"Too long: may not be more than {MAX_STRING_ATTRIBUTE} bytes")]
    return []


def _device(path: str, device: dict[str, Any], per_device_nodes: bool) -> Causes:
    causes = _dns_label(f"{path}.name", device.get("name"))
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(_too_many(f"{path}.attributes", len(attributes) + len(capacity), MAX_ATTRIBUTES_AND_CAPACITIES))
    for name, value in attributes.items():
        if not _QUALIFIED.match(name):
            causes.append(_invalid(f"{path}.attributes", name, "must be a C identifier, optionally prefixed by a "
                                                                "DNS subdomain and '/'"))
        causes += _attribute(f"{path}.attributes[{name}]", value)
    consumes = device.get("consumesCounters") or []
    if len(consumes) > MAX_CONSUMPTIONS_PER_DEVICE:
        causes.append(_too_many(f"{path}.consumesCounters", len(consumes), MAX_CONSUMPTIONS_PER_DEVICE))
    seen_sets: set[str] = set()
    for i, c in enumerate(consumes):
        cset = c.get("counterSet")
        if cset in seen_sets:
            causes.append(field_error(f"{path}.consumesCounters[{i}].counterSet", "FieldValueDuplicate",
                                      f"Duplicate value: {json.dumps(cset)}"))
        seen_sets.add(cset)
        if len(c.get("counters") or {}) > MAX_COUNTERS_PER_SET:
            causes.append(_too_many(f"{path}.consumesCounters[{i}].counters", len(c["counters"]),
                                    MAX_COUNTERS_PER_SET))
    for key in ("bindingConditions", "bindingFailureConditions"):
        if len(device.get(key) or []) > MAX_BINDING_CONDITIONS:
            causes.append(_too_many(f"{path}.{key}", len(device[key]), MAX_BINDING_CONDITIONS))
    if bool(device.get("bindingConditions")) != bool(device.get("bindingFailureConditions")):
        causes.append(_invalid(f"{path}.bindingConditions", device.get("bindingConditions"),
                               "bindingConditions and bindingFailureConditions must be set together"))
    if not per_device_nodes and any(k in device for k in ("nodeName", "nodeSelector", "allNodes")):
        causes.append(_invalid(f"{path}.nodeName", device.get("nodeName"),
                               "may only be set when spec.perDeviceNodeSelection is true"))
    return causes


def validate_resource_slice(obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    causes = _driver("spec.driver", spec.get("driver"))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        causes.append(_required("spec.pool.name"))
    if not isinstance(pool.get("resourceSliceCount"), int) or pool.get("resourceSliceCount", 0) < 1:
        causes.append(_invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount"),
                               "must be greater than zero"))
    if not isinstance(pool.get("generation", 0), int) or pool.get("generation", 0) < 0:
        causes.append(_invalid("spec.pool.generation", pool.get("generation"), "must be greater than or equal to 0"))
    chosen = [k for k in _NODE_CHOICES if spec.get(k) not in (None, False, "")]
    if len(chosen) != 1:
        causes.append(field_error("spec", "FieldValueRequired" if not chosen else "FieldValueInvalid",
                                  "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
                                  f"is required{'' if not chosen else ', got ' + ', '.join(chosen)}"))
    devices = spec.get("devices") or []
    counter_sets = spec.get("sharedCounters") or []
    if devices and counter_sets:
        causes.append(_invalid("spec", None, "only one of devices and sharedCounters may be set"))
    limit = MAX_DEVICES
    if any(d.get("consumesCounters") or d.get("taints") for d in devices):
        limit = MAX_DEVICES_WITH_COUNTERS_OR_TAINTS
    if len(devices) > limit:
        causes.append(_too_many("spec.devices", len(devices), limit))
    names: set[str] = set()
    for i, d in enumerate(devices):
        if d.get("name") in names:
            causes.append(field_error(f"spec.devices[{i}].name", "FieldValueDuplicate",
                                      f"Duplicate value: {json.dumps(d.get('name'))}"))
        names.add(d.get("name"))
        causes += _device(f"spec.devices[{i}]", d, bool(spec.get("perDeviceNodeSelection")))
    if len(counter_sets) > MAX_COUNTER_SETS:
        causes.append(_too_many("spec.sharedCounters", len(counter_sets), MAX_COUNTER_SETS))
    for i, cset in enumerate(counter_sets):
        causes += _dns_label(f"spec.sharedCounters[{i}].name", cset.get("name"))
        counters = cset.get("counters") or {}
        if not counters:
            causes.append(_required(f"spec.sharedCounters[{i}].counters"))
        if len(counters) > MAX_COUNTERS_PER_SET:
            causes.append(_too_many(f"spec.sharedCounters[{i}].counters", len(counters), MAX_COUNTERS_PER_SET))
        for name in counters:
            causes += _dns_label(f"spec.sharedCounters[{i}].counters[{name}]", name)
    return causes


def _requests(path: str, requests: list[dict[str, Any]]) -> Causes:
    causes: Causes = []
    if len(requests) > MAX_REQUESTS:
        causes.append(_too_many(path, len(requests), MAX_REQUESTS))
    names: set[str] = set()
    for i, r in enumerate(requests):
        causes += _dns_label(f"{path}[{i}].name", r.get("name"))
        if r.get("name") in names:
            causes.append(field_error(f"{path}[{i}].name", "FieldValueDuplicate",
                                      f"Duplicate value: {json.dumps(r.get('name'))}"))
        names.add(r.get("name"))
        exact, first = r.get("exactly"), r.get("firstAvailable")
        if bool(exact) == bool(first):
            causes.append(field_error(f"{path}[{i}]", "FieldValueRequired",
                                      "exactly one of `exactly` or `firstAvailable` is required"))
        if exact:
            if not exact.get("deviceClassName"):
                causes.append(_required(f"{path}[{i}].exactly.deviceClassName"))
            mode = exact.get("allocationMode", "ExactCount")
            if mode not in ("ExactCount", "All"):
                causes.append(field_error(f"{path}[{i}].exactly.allocationMode", "FieldValueNotSupported",
                                          f'Unsupported value: {json.dumps(mode)}: supported values: "All", '
                                          '"ExactCount"'))
            count = exact.get("count", 1)
            if mode == "ExactCount" and (not isinstance(count, int) or count < 1):
                causes.append(_invalid(f"{path}[{i}].exactly.count", count, "must be greater than zero"))
            if len(exact.get("selectors") or []) > MAX_SELECTORS:
                causes.append(_too_many(f"{path}[{i}].exactly.selectors", len(exact["selectors"]), MAX_SELECTORS))
    return causes


def validate_resource_claim(obj: dict[str, Any], prefix: str = "spec") -> Causes:
    devices = ((obj.get("spec") or {}) if prefix == "spec" else ((obj.get("spec") or {}).get("spec") or {})).get(
        "devices") or {}
    return _requests(f"{prefix}.devices.requests", devices.get("requests") or [])


def validate_device_class(obj: dict[str, Any]) -> Causes:
    selectors = (obj.get("spec") or {}).get("selectors") or []
    causes: Causes = []
    if len(selectors) > MAX_SELECTORS:
        causes.append(_too_many("spec.selectors", len(selectors), MAX_SELECTORS))
    for i, s in enumerate(selectors):
        if not ((s.get("cel") or {}).get("expression")):
            causes.append(_required(f"spec.selectors[{i}].cel.expression"))
    return causes


def validate(kind: str, obj: dict[str, Any]) -> Causes:
    """Field errors for a resource.k8s.io object (empty when valid)."""
    if kind == "ResourceSlice":
        return validate_resource_slice(obj)
    if kind == "ResourceClaim":
        return validate_resource_claim(obj)
    if kind == "ResourceClaimTemplate":
        return validate_resource_claim(obj, prefix="spec.spec")
    if kind == "DeviceClass":
        return validate_device_class(obj)
    return []
