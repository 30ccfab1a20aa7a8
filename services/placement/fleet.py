"""The fleet's free state, indexed by free-GPU mask: filter, prioritize, best node.

Pure domain (no I/O). Each node is known by its free physical-GPU mask (see
``fit.py``), its healthy mask (what it could give if everything on it ended) and
whether it can take GPU pods at all (its Fabric Manager is reachable). Nodes are
bucketed by free mask — at most 256 buckets — so:

* ``best(size)`` walks the precomputed best-fit order of masks for that size and
  returns a node of the first non-empty bucket: O(#distinct masks), independent
  of the number of nodes (what the simulator calls per pod);
* ``filter``/``prioritize`` answer the scheduler's candidate list: one dict
  lookup per candidate name, then work per distinct mask (the scheduler sends
  the names, so reading them is the floor).

Scores are dense ranks over the candidates: the best-fit key among them gets
``MAX_EXTENDER_PRIORITY`` (10), the next distinct key 9, and so on; nodes that
do not fit, or are the 11th+ distinct key, get 0. The scheduler multiplies by the
extender's weight and picks the highest total, so the best fit wins whenever the
extender's weight dominates the other score plugins (see deploy/scheduler/).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from core.topology import GPU_COUNT
from services.placement.fit import FIT_TABLE, FITS, FULL_MASK, MASK_COUNT, PREFERENCE, Fit, gpus_of

MAX_EXTENDER_PRIORITY = 10
MIN_EXTENDER_PRIORITY = 0


@dataclass(frozen=True, slots=True)
class NodeFree:
    """One node's placement-relevant state, derived from what the node reports."""

    name: str
    free_mask: int
    healthy_mask: int = FULL_MASK
    usable: bool = True  # False: the node cannot activate partitions (reason says why)
    reason: str | None = None

    def __post_init__(self) -> None:
        for field_name in ("free_mask", "healthy_mask"):
            value = getattr(self, field_name)
            if not 0 <= value <= FULL_MASK:
                raise ValueError(f"{field_name} must be 0..{FULL_MASK}, got {value}")
        if self.free_mask & ~self.healthy_mask:
            raise ValueError(f"free_mask {self.free_mask:#04x} has GPUs outside healthy_mask {self.healthy_mask:#04x}")


@dataclass(frozen=True, slots=True)
class Freeing:
    """A node's GPUs that free by themselves soon: ``mask`` those known by physical id, and
    ``unplaced`` more of its pods being deleted whose GPUs nothing names."""

    mask: int = 0
    unplaced: int = 0


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """The filter's answer: kept names (in request order) and the reasons for the rest."""

    passed: list[str]
    failed: dict[str, str]  # preemption (freeing GPUs) could help
    unresolvable: dict[str, str]  # it could not: unknown node, unhealthy, no fabric


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a request goes: the node and the node's own GPU choice."""

    node: str
    fit: Fit

    @property
    def gpus(self) -> tuple[int, ...]:
        assert self.fit.choice is not None
        return self.fit.choice.gpus


def _fmt(mask: int) -> str:
    return "[" + ",".join(str(g) for g in sorted(gpus_of(mask))) + "]"


_UNUSABLE = MASK_COUNT  # state of a node that cannot take GPU pods
_UNKNOWN = MASK_COUNT + 1  # state of a name the index has never heard of
#: FITS extended with the two pseudo-states (never fit).
_FITS_X: tuple[tuple[bool, ...], ...] = ((), *((*FITS[s], False, False) for s in range(1, GPU_COUNT + 1)))

_REASON_CACHE: dict[tuple[int, int], str] = {}


def _unhealthy_reason(healthy_mask: int, size: int) -> str:
    return f"healthy GPUs {_fmt(healthy_mask)} hold no {size}-GPU partition"


def _busy_reason(free_mask: int, size: int) -> str:
    key = (free_mask, size)
    reason = _REASON_CACHE.get(key)
    if reason is None:
        if free_mask.bit_count() < size:
            reason = f"free GPUs {_fmt(free_mask)}: fewer than {size}"
        else:
            reason = f"free GPUs {_fmt(free_mask)}: no whole {size}-GPU partition"
        _REASON_CACHE[key] = reason
    return reason


class FleetIndex:
    """Per-node free masks plus buckets of nodes by mask. Thread-safe."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeFree] = {}
        # name -> free mask for usable nodes, _UNUSABLE otherwise: the filter's fast path.
        self._state: dict[str, int] = {}
        self._healthy: dict[str, int] = {}
        self._buckets: list[dict[str, None]] = [{} for _ in range(MASK_COUNT)]
        self._lock = threading.Lock()

    # -- state -----------------------------------------------------------------

    def set_node(self, node: NodeFree) -> None:
        """Insert or replace one node's state."""
        with self._lock:
            old = self._nodes.get(node.name)
            if old is not None and old.usable:
                self._buckets[old.free_mask].pop(node.name, None)
            self._nodes[node.name] = node
            self._state[node.name] = node.free_mask if node.usable else _UNUSABLE
            self._healthy[node.name] = node.healthy_mask
            if node.usable:
                self._buckets[node.free_mask][node.name] = None

    def remove_node(self, name: str) -> None:
        with self._lock:
            old = self._nodes.pop(name, None)
            self._state.pop(name, None)
            self._healthy.pop(name, None)
            if old is not None and old.usable:
                self._buckets[old.free_mask].pop(name, None)

    def take(self, name: str, gpus_mask: int) -> None:
        """Mark GPUs of a node used (an assumption until the node reports it)."""
        node = self._nodes[name]
        if gpus_mask & ~node.free_mask:
            raise ValueError(f"GPUs {_fmt(gpus_mask & ~node.free_mask)} of {name} are not free")
        self.set_node(NodeFree(name, node.free_mask & ~gpus_mask, node.healthy_mask, node.usable, node.reason))

    def give_back(self, name: str, gpus_mask: int) -> None:
        """Mark GPUs of a node free again (healthy ones only)."""
        node = self._nodes[name]
        free = (node.free_mask | gpus_mask) & node.healthy_mask
        self.set_node(NodeFree(name, free, node.healthy_mask, node.usable, node.reason))

    def node(self, name: str) -> NodeFree | None:
        return self._nodes.get(name)

    def names(self) -> list[str]:
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def mask_histogram(self) -> dict[int, int]:
        """Usable nodes per free mask (non-empty buckets only)."""
        return {m: len(b) for m, b in enumerate(self._buckets) if b}

    # -- decisions -------------------------------------------------------------

    def best(self, size: int) -> Placement | None:
        """The best-fit node over the whole fleet, or None: O(#distinct masks)."""
        _check_size(size)
        buckets = self._buckets
        table = FIT_TABLE[size]
        for mask in PREFERENCE[size]:
            bucket = buckets[mask]
            if bucket:
                node = next(iter(bucket), None)  # None: emptied by another thread meanwhile
                if node is not None:
                    return Placement(node, table[mask])
        return None

    def choose_on(self, name: str, size: int) -> Fit:
        """The GPUs the device plugin will pick on this node (``choose_gpus``)."""
        _check_size(size)
        node = self._nodes.get(name)
        if node is None:
            raise KeyError(name)
        return FIT_TABLE[size][node.free_mask]

    def filter(self, names: Iterable[str], size: int, *, best_only: bool = False) -> FilterOutcome:
        """Keep the candidates that can give a whole partition of the pod's size.

        ``best_only``: keep, of those, only the best fit (the lowest best-fit key of their free
        GPUs, ties kept: kube-scheduler's own scoring picks among them) and fail the others,
        saying that another node fits better. What :meth:`prioritize` would rank first is then
        all kube-scheduler gets, and it need not call prioritize: one round trip less per pod."""
        names = list(names)
        if size == 0:
            return FilterOutcome(names, {}, {})
        if size > GPU_COUNT:
            reason = f"pod requests {size} GPUs; a node has {GPU_COUNT}"
            return FilterOutcome([], {}, {n: reason for n in names})
        _check_size(size)
        fits = _FITS_X[size]
        state = self._state
        passed: list[str] = []
        passed_masks: list[int] = []
        rejected: list[str] = []  # flat lists, not tuples: no GC-tracked garbage per node
        rejected_masks: list[int] = []
        for name in names:
            mask = state.get(name, _UNKNOWN)
            if fits[mask]:
                passed.append(name)
                passed_masks.append(mask)
            else:
                rejected.append(name)
                rejected_masks.append(mask)
        failed: dict[str, str] = {}
        if best_only and len(distinct := set(passed_masks)) > 1:
            table = FIT_TABLE[size]
            best = min(table[m].key for m in distinct)
            better = f"another node fits a {size}-GPU partition better (best fit)"
            kept: list[str] = []
            for name, mask in zip(passed, passed_masks, strict=True):
                if table[mask].key == best:
                    kept.append(name)
                else:
                    failed[name] = better
            passed = kept
        unresolvable: dict[str, str] = {}
        healthy_of = self._healthy
        reasons: dict[int, str] = {}
        for name, mask in zip(rejected, rejected_masks, strict=True):
            if mask < _UNUSABLE and fits[healthy_of.get(name, 0)]:
                busy = reasons.get(mask)
                if busy is None:
                    busy = reasons[mask] = _busy_reason(mask, size)
                failed[name] = busy
            elif mask == _UNKNOWN:
                unresolvable[name] = "no FabricState for the node: its NVLink partitions are unknown"
            else:
                node = self._nodes.get(name)
                if node is None:  # removed meanwhile
                    unresolvable[name] = "node no longer known"
                elif mask == _UNUSABLE:
                    unresolvable[name] = node.reason or "the node cannot activate NVLink partitions"
                else:
                    unresolvable[name] = _unhealthy_reason(node.healthy_mask, size)
        return FilterOutcome(passed, failed, unresolvable)

    def prioritize(self, names: Iterable[str], size: int) -> list[tuple[str, int]]:
        """Best-fit scores 0..10 for the candidates, in request order."""
        names = list(names)
        if size == 0 or size > GPU_COUNT:
            return [(n, MIN_EXTENDER_PRIORITY) for n in names]
        fits = _FITS_X[size]
        table = FIT_TABLE[size]
        state = self._state
        masks = [state.get(name, _UNKNOWN) for name in names]
        ranked = sorted((m for m in set(masks) if fits[m]), key=lambda m: table[m].key)
        score_of = [MIN_EXTENDER_PRIORITY] * (_UNKNOWN + 1)
        for rank, m in enumerate(ranked[:MAX_EXTENDER_PRIORITY]):
            score_of[m] = MAX_EXTENDER_PRIORITY - rank
        return [(n, score_of[m]) for n, m in zip(names, masks, strict=True)]


def _check_size(size: int) -> None:
    if not 1 <= size <= GPU_COUNT:
        raise ValueError(f"GPU count must be 1..{GPU_COUNT}, got {size}")


__all__ = [
    "FilterOutcome",
    "FleetIndex",
    "Freeing",
    "MAX_EXTENDER_PRIORITY",
    "MIN_EXTENDER_PRIORITY",
    "NodeFree",
    "Placement",
]
