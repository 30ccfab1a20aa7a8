"""GPU and NVLink partition topology of an HGX H100 8-GPU board.

Fabric Manager's shared-NVSwitch model offers a fixed table of partitions; a
multi-GPU container only gets NVLink between its GPUs when its GPUs are exactly
one partition of that table. GPUs are named here by their *physical id* (1..8),
the id Fabric Manager uses; the PCI address of each physical id is learnt from
Fabric Manager at run time (see services/fabric).

The choice of which partition to hand out (``choose_gpus``) lives here because
two parts must agree on it: the device plugin's GetPreferredAllocation on the
node, and the scheduler extender that picks the node. Both call this function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

GPU_COUNT = 8
PHYSICAL_IDS: tuple[int, ...] = tuple(range(1, GPU_COUNT + 1))
NVLINKS_PER_GPU = 18
PARTITION_SIZES: tuple[int, ...] = (8, 4, 2, 1)


@dataclass(frozen=True, order=True)
class Partition:
    """One Fabric Manager partition: an id and the physical GPU ids it joins."""

    id: int
    gpus: frozenset[int] = field(compare=False)

    @property
    def size(self) -> int:
        return len(self.gpus)

    @property
    def nvlinks(self) -> int:
        """NVLinks Fabric Manager reports for the partition (18 per GPU; none alone)."""
        return 0 if self.size == 1 else NVLINKS_PER_GPU * self.size

    def overlaps(self, other: Partition) -> bool:
        return bool(self.gpus & other.gpus)

    def sorted_gpus(self) -> list[int]:
        return sorted(self.gpus)


def _p(pid: int, *gpus: int) -> Partition:
    return Partition(pid, frozenset(gpus))


#: NVIDIA's default partition table for HGX H100 8-GPU (shared NVSwitch model).
HGX_H100_PARTITIONS: tuple[Partition, ...] = (
    _p(0, 1, 2, 3, 4, 5, 6, 7, 8),
    _p(1, 1, 2, 3, 4),
    _p(2, 5, 6, 7, 8),
    _p(3, 1, 3),
    _p(4, 2, 4),
    _p(5, 5, 7),
    _p(6, 6, 8),
    *(_p(6 + g, g) for g in PHYSICAL_IDS),
)

_BY_ID = {p.id: p for p in HGX_H100_PARTITIONS}
_BY_GPUS = {p.gpus: p for p in HGX_H100_PARTITIONS}


def partition_by_id(partition_id: int) -> Partition:
    try:
        return _BY_ID[partition_id]
    except KeyError:
        raise KeyError(f"no partition {partition_id} on HGX H100 (ids 0-14)") from None


def partition_for(gpus: Iterable[int]) -> Partition | None:
    """The partition made of exactly these physical ids, or None if they form none."""
    return _BY_GPUS.get(frozenset(gpus))


def single_gpu_partition(physical_id: int) -> Partition:
    return _BY_GPUS[frozenset((physical_id,))]


def free_partitions(free: Iterable[int]) -> list[Partition]:
    """Partitions whose every GPU is free."""
    free_set = frozenset(free)
    return [p for p in HGX_H100_PARTITIONS if p.gpus <= free_set]


def cover_size(size: int) -> int:
    """Smallest partition size that can hold ``size`` GPUs (3 -> 4, 5..7 -> 8)."""
    if not 1 <= size <= GPU_COUNT:
        raise ValueError(f"GPU count must be 1..{GPU_COUNT}, got {size}")
    return next(s for s in sorted(PARTITION_SIZES) if s >= size)


@dataclass(frozen=True)
class Choice:
    """The GPUs chosen for a request and why."""

    gpus: tuple[int, ...]
    partition: Partition | None  # the NVLink partition the GPUs form, if any
    broken: int  # still-free larger partitions this choice breaks
    numa_nodes: int  # distinct NUMA nodes the GPUs span
    reason: str


def _broken_by(gpus: frozenset[int], free_larger: list[Partition]) -> int:
    return sum(1 for p in free_larger if p.gpus & gpus)


def choose_gpus(
    free: Iterable[int],
    size: int,
    numa: Mapping[int, int] | None = None,
    must_include: Iterable[int] = (),
) -> Choice | None:
    """Pick ``size`` free physical GPUs, or None when they cannot be had.

    Rules, in order:
    1. sizes 1/2/4/8 take a whole free partition of that size (NVLink between
       them); other sizes (3, 5-7) take GPUs inside the smallest free covering
       partition, without NVLink, since a partition shared with another tenant's
       GPU would join two tenants on one fabric;
    2. among candidates, break the fewest still-free larger partitions
       (keeps whole quads for 4-GPU and whole boards for 8-GPU requests);
    3. then span the fewest NUMA nodes; then the lowest physical ids.
    If no candidate exists under rule 1 but ``size`` GPUs are free, any free
    GPUs are returned with ``partition=None`` (NVLink-less), best-effort.
    """
    free_set = frozenset(free)
    must = frozenset(must_include)
    if not 1 <= size <= GPU_COUNT or len(free_set) < size or not must <= free_set:
        return None
    numa = numa or {}
    free_parts = free_partitions(free_set)

    def numa_span(gpus: Iterable[int]) -> int:
        return len({numa.get(g, 0) for g in gpus})

    candidates: list[tuple[frozenset[int], Partition | None]] = []
    if size in PARTITION_SIZES:
        candidates = [(p.gpus, p) for p in free_parts if p.size == size]
    else:
        covering = cover_size(size)
        for p in HGX_H100_PARTITIONS:
            usable = p.gpus & free_set
            if p.size == covering and len(usable) >= size:
                # Inside a covering partition (whole or already broken), prefer the
                # GPUs that themselves break the fewest free pairs.
                ordered = sorted(usable, key=lambda g: (_pair_mate_free(g, free_set), g))
                candidates.append((frozenset(ordered[:size]), None))
    candidates = [(g, p) for g, p in candidates if must <= g]

    if candidates:

        def score(c: tuple[frozenset[int], Partition | None]) -> tuple[int, int, list[int]]:
            gpus, _ = c
            larger = [p for p in free_parts if p.size > len(gpus)]
            return (_broken_by(gpus, larger), numa_span(gpus), sorted(gpus))

        gpus, part = min(candidates, key=score)
        larger = [p for p in free_parts if p.size > len(gpus)]
        broken = _broken_by(gpus, larger)
        if part is not None:
            reason = (
                f"partition {part.id} ({part.size} GPU{'s' if part.size > 1 else ''}, "
                f"{part.nvlinks} NVLinks) breaks {broken} free larger partition(s)"
            )
        else:
            reason = (
                f"{size} GPUs form no NVLink partition; taken inside a free "
                f"{cover_size(size)}-GPU partition without NVLink, breaks {broken}"
            )
        return Choice(tuple(sorted(gpus)), part, broken, numa_span(gpus), reason)

    # Best effort: enough GPUs are free but no partition-shaped set is.
    ordered = sorted(free_set - must, key=lambda g: (numa.get(g, 0), g))
    gpus = frozenset(must | frozenset(ordered[: size - len(must)]))
    larger = [p for p in free_parts if p.size > len(gpus)]
    return Choice(
        tuple(sorted(gpus)),
        partition_for(gpus),
        _broken_by(gpus, larger),
        numa_span(gpus),
        f"no free {size}-GPU partition; {size} free GPUs given without NVLink",
    )


def _pair_mate_free(gpu: int, free: frozenset[int]) -> int:
    """1 if the GPU's pair partner is free too (taking it breaks a free pair)."""
    for p in HGX_H100_PARTITIONS:
        if p.size == 2 and gpu in p.gpus:
            return int(p.gpus <= free)
    return 0


def partitions_for_gpus(gpus: Iterable[int]) -> list[Partition]:
    """The partitions to activate so that a container gets these GPUs.

    A set that is a partition gets that one partition (NVLink); any other set
    gets one single-GPU partition per GPU (isolated, no NVLink).
    """
    gpu_set = frozenset(gpus)
    part = partition_for(gpu_set)
    if part is not None:
        return [part]
    return [single_gpu_partition(g) for g in sorted(gpu_set)]
