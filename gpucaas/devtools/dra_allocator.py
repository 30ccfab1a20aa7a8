"""A stand-in for kube-scheduler's structured DRA allocator (development and tests only).

No kube-scheduler runs on these machines, so the sandbox's stand-in scheduler and the
placement simulator allocate ResourceClaims with this model of what kube-scheduler's
``structured`` allocator does (k8s.io/dynamic-resource-allocation/structured,
allocator.go; the DRA docs' "Allocation" section), for the features gpucaas uses:

* only *complete* pools are used: every slice of a pool at its newest ``generation`` and
  as many slices as ``resourceSliceCount`` says; devices of incomplete pools are skipped;
* candidates are visited first-fit: pools sorted by driver and pool name, slices in
  name order, devices in the order the slice lists them;
* a device is a candidate for a request when every CEL selector of the request's
  DeviceClass and of the request evaluates to true (``device.driver``,
  ``device.attributes["<domain>"].<name>``, ``device.capacity``), it is not allocated to
  any claim yet, and the counters it consumes (``consumesCounters``) are still available
  in the pool's shared counter sets after what allocated devices already consume;
* all requests of a claim must be satisfied together (``ExactCount``, ``count`` devices
  each); the search backtracks over earlier choices when a later request cannot be met;
* devices with ``bindingConditions`` are returned with them, so the caller waits for the
  driver to report the conditions before binding (KEP-5007).

Not modelled: ``firstAvailable``, constraints (``matchAttribute``), admin access,
consumable capacity, device taints and tolerations, ``allNodes``/node selectors,
prioritised lists. A claim using them gets :class:`Unsupported`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import celpy

from functools import lru_cache

from kubernetes.utils import parse_quantity as _parse_quantity


@lru_cache(maxsize=4096)
def parse_quantity(value: str) -> Decimal:
    return Decimal(_parse_quantity(value))


class Unsupported(ValueError):
    """The claim uses a DRA feature this stand-in does not model."""


@dataclass(frozen=True)
class DeviceRef:
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    ref: DeviceRef
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()

    def as_result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request, "driver": self.ref.driver,
                               "pool": self.ref.pool, "device": self.ref.device}
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        return out


@dataclass
class _Pool:
    driver: str
    name: str
    generation: int = 0
    counters: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # set -> counter -> value
    devices: list[dict[str, Any]] = field(default_factory=list)
    consumption: dict[str, list[tuple[str, str, Decimal]]] = field(default_factory=dict)  # by device


_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def _program(expression: str) -> Any:
    prog = _PROGRAMS.get(expression)
    if prog is None:
        prog = _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression))
    return prog


def _cel_device(driver: str, device: Mapping[str, Any]) -> Any:
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        domain = domain or driver
        (kind, raw), = value.items()
        attributes.setdefault(domain, {})[short] = raw
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = float(parse_quantity(value["value"]))
    return celpy.json_to_cel({"driver": driver, "attributes": attributes, "capacity": capacity,
                              "allowMultipleAllocations": bool(device.get("allowMultipleAllocations"))})


def matches(expressions: Iterable[str], driver: str, device: Mapping[str, Any]) -> bool:
    """Whether every CEL selector is true for ``device`` (an error aborts, as upstream)."""
    activation = {"device": _cel_device(driver, device)}
    for expression in expressions:
        result = _program(expression).evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType):
            raise ValueError(f"selector {expression!r} did not evaluate to a bool: {result!r}")
        if not result:
            return False
    return True


_MATCHES: dict[tuple[Any, ...], bool] = {}


def _matches_cached(expressions: tuple[str, ...], pool: _Pool, device: Mapping[str, Any]) -> bool:
    # A device is identified by driver, pool, the pool's generation and its name: what the
    # driver publishes under one generation does not change.
    key = (expressions, pool.driver, pool.name, pool.generation, device["name"])
    hit = _MATCHES.get(key)
    if hit is None:
        if len(_MATCHES) > 100_000:
            _MATCHES.clear()
        hit = _MATCHES[key] = matches(expressions, pool.driver, device)
    return hit


def complete_pools(slices: Iterable[Mapping[str, Any]], node_name: str) -> list[_Pool]:
    """The node's complete pools, in allocation order (module docstring)."""
    by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s["spec"]
        if spec.get("nodeName") != node_name:
            continue
        by_pool.setdefault((spec["driver"], spec["pool"]["name"]), []).append(s)
    pools = []
    for (driver, name), members in sorted(by_pool.items()):
        newest = max(m["spec"]["pool"]["generation"] for m in members)
        current = sorted((m for m in members if m["spec"]["pool"]["generation"] == newest),
                         key=lambda m: m["metadata"]["name"])
        if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
            continue  # incomplete: the driver is still publishing
        pool = _Pool(driver, name, newest)
        for m in current:
            for cset in m["spec"].get("sharedCounters") or []:
                pool.counters[cset["name"]] = {k: parse_quantity(v["value"]) for k, v in cset["counters"].items()}
            pool.devices.extend(m["spec"].get("devices") or [])
        pool.consumption = {d["name"]: _consumption(d) for d in pool.devices}
        pools.append(pool)
    return pools


def _consumption(device: Mapping[str, Any]) -> list[tuple[str, str, Decimal]]:
    return [(c["counterSet"], name, parse_quantity(v["value"]))
            for c in device.get("consumesCounters") or [] for name, v in c["counters"].items()]


def _request_shape(request: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]) -> tuple[str, int, list[str]]:
    if "firstAvailable" in request:
        raise Unsupported("firstAvailable is not modelled by the stand-in allocator")
    exact = request.get("exactly") or {}
    if exact.get("adminAccess") or exact.get("capacity") or exact.get("tolerations"):
        raise Unsupported("adminAccess, capacity and tolerations are not modelled")
    if exact.get("allocationMode", "ExactCount") != "ExactCount":
        raise Unsupported("only allocationMode ExactCount is modelled")
    class_name = exact["deviceClassName"]
    if class_name not in classes:
        raise LookupError(f'DeviceClass "{class_name}" not found')
    exprs = [s["cel"]["expression"] for s in classes[class_name].get("spec", {}).get("selectors") or []]
    exprs += [s["cel"]["expression"] for s in exact.get("selectors") or []]
    return request["name"], int(exact.get("count", 1)), exprs


def allocate(claim: Mapping[str, Any], node_name: str, slices: Sequence[Mapping[str, Any]],
             classes: Mapping[str, Mapping[str, Any]],
             allocated: Iterable[DeviceRef]) -> list[AllocatedDevice] | None:
    """Devices on ``node_name`` for every request of ``claim``, or None when none fit.

    ``allocated``: devices already in some claim's ``status.allocation`` (all claims).
    """
    spec = claim.get("spec", {}).get("devices", {})
    if spec.get("constraints"):
        raise Unsupported("claim constraints are not modelled by the stand-in allocator")
    wanted: list[tuple[str, tuple[str, ...]]] = []
    for request in spec.get("requests") or []:
        name, count, exprs = _request_shape(request, classes)
        wanted.extend((name, tuple(exprs)) for _ in range(count))
    pools = complete_pools(slices, node_name)
    taken = set(allocated)
    used: dict[tuple[str, str, str, str], Decimal] = {}
    for pool in pools:
        for device in pool.devices:
            if DeviceRef(pool.driver, pool.name, device["name"]) in taken:
                for cset, counter, value in pool.consumption[device["name"]]:
                    key = (pool.driver, pool.name, cset, counter)
                    used[key] = used.get(key, Decimal(0)) + value

    def fits(pool: _Pool, device: Mapping[str, Any]) -> bool:
        for cset, counter, value in pool.consumption[device["name"]]:
            have = pool.counters.get(cset, {}).get(counter)
            if have is None or used.get((pool.driver, pool.name, cset, counter), Decimal(0)) + value > have:
                return False
        return True

    chosen: list[AllocatedDevice] = []

    def search(i: int) -> bool:
        if i == len(wanted):
            return True
        request, exprs = wanted[i]
        for pool in pools:
            for device in pool.devices:
                ref = DeviceRef(pool.driver, pool.name, device["name"])
                if ref in taken or not _matches_cached(exprs, pool, device) or not fits(pool, device):
                    continue
                taken.add(ref)
                deltas = pool.consumption[device["name"]]
                for cset, counter, value in deltas:
                    key = (pool.driver, pool.name, cset, counter)
                    used[key] = used.get(key, Decimal(0)) + value
                chosen.append(AllocatedDevice(request, ref, tuple(device.get("bindingConditions") or ()),
                                              tuple(device.get("bindingFailureConditions") or ())))
                if search(i + 1):
                    return True
                chosen.pop()
                taken.discard(ref)
                for cset, counter, value in deltas:
                    used[(pool.driver, pool.name, cset, counter)] -= value
        return False

    return chosen if search(0) else None
