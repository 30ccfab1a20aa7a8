"""Which GPUs to prefer and what an allocation means for NVLink (pure).

The kubelet speaks PCI addresses; Fabric Manager partitions speak physical ids.
``PhysicalMap`` translates between them: learnt from the fabric service (which
learns it from Fabric Manager) or, when that service is absent, PCI order
(index + 1 over every NVIDIA GPU on the node) -- wrong on boards such as DGX
H100 whose module ids do not follow bus order, hence logged and exported.

``preferred`` delegates the choice to ``core.topology.choose_gpus`` so the
node and the scheduler extender agree on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core import topology
from services.device_plugin.errors import InvalidRequest

SOURCE_FABRIC = "fabric-manager"
SOURCE_PCI_ORDER = "pci-order"


@dataclass(frozen=True)
class PhysicalMap:
    """PCI address <-> Fabric Manager physical id, and where the map came from."""

    by_bdf: Mapping[str, int]
    source: str

    @classmethod
    def pci_order(cls, bdfs: Iterable[str]) -> PhysicalMap:
        ordered = sorted(bdfs)[: topology.GPU_COUNT]
        return cls({b: i + 1 for i, b in enumerate(ordered)}, SOURCE_PCI_ORDER)

    @classmethod
    def from_fabric(cls, gpus: Iterable[Mapping[str, object]]) -> PhysicalMap:
        """From the fabric service's ``/v1/topology`` ``gpus`` list."""
        by_bdf: dict[str, int] = {}
        for g in gpus:
            pid, bdf = g.get("physical_id"), g.get("pci_bus_id")
            if isinstance(pid, int) and isinstance(bdf, str) and pid in topology.PHYSICAL_IDS:
                by_bdf[normalise_bdf(bdf)] = pid
        return cls(by_bdf, SOURCE_FABRIC)

    def physical(self, bdf: str) -> int | None:
        return self.by_bdf.get(bdf)

    def bdf_of(self) -> dict[int, str]:
        return {pid: bdf for bdf, pid in self.by_bdf.items()}


def normalise_bdf(bdf: str) -> str:
    """Fabric Manager prints ``00000000:18:00.0``; sysfs says ``0000:18:00.0``."""
    bdf = bdf.strip().lower()
    domain, _, rest = bdf.partition(":")
    if rest and len(domain) > 4:
        bdf = f"{int(domain, 16):04x}:{rest}"
    return bdf


def preferred(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    pmap: PhysicalMap,
    numa: Mapping[str, int | None],
) -> list[str]:
    """GetPreferredAllocation for one container: ``size`` ids from ``available``.

    Partition-shaped sets first (``choose_gpus``); GPUs without a physical id are
    used only when the known ones cannot make up the size.
    """
    avail = list(dict.fromkeys(available))
    must = list(dict.fromkeys(must_include))
    if size < 1:
        raise InvalidRequest(f"allocation_size must be >= 1, got {size}")
    if size > len(avail):
        raise InvalidRequest(f"allocation_size {size} exceeds the {len(avail)} available device(s)")
    if not set(must) <= set(avail):
        raise InvalidRequest(
            f"must_include_deviceIDs must be a subset of available_deviceIDs, extra: {sorted(set(must) - set(avail))}"
        )
    if len(must) > size:
        raise InvalidRequest(f"{len(must)} must_include_deviceIDs exceed allocation_size {size}")

    known = {b: p for b in avail if (p := pmap.physical(b)) is not None}
    unknown_must = [b for b in must if b not in known]
    by_pid = {p: b for b, p in known.items()}
    pid_numa = {p: numa.get(b) or 0 for b, p in known.items()}
    want = size - len(unknown_must)
    chosen: list[str] = list(unknown_must)
    if want > 0:
        must_pids = [known[b] for b in must if b in known]
        want_known = min(want, len(known))
        choice = (
            topology.choose_gpus(known.values(), want_known, numa=pid_numa, must_include=must_pids)
            if want_known >= max(1, len(must_pids))
            else None
        )
        if choice is not None:
            chosen += [by_pid[p] for p in choice.gpus]
        else:
            chosen += [by_pid[p] for p in sorted(must_pids)]
            rest = sorted((b for b in known if b not in chosen), key=lambda b: (pid_numa[known[b]], known[b]))
            chosen += rest[: want_known - len(must_pids)]
        if len(chosen) < size:
            rest = [b for b in avail if b not in chosen and b not in known]
            chosen += rest[: size - len(chosen)]
    return sorted(chosen)


@dataclass(frozen=True)
class Shape:
    """What a set of GPUs is with respect to the partition table."""

    physical_ids: tuple[int, ...]
    partition: topology.Partition | None
    complete: bool  # every GPU had a physical id

    @property
    def nvlink(self) -> bool:
        return self.partition is not None and self.partition.size > 1


def shape_of(bdfs: Iterable[str], pmap: PhysicalMap) -> Shape:
    bdfs = list(bdfs)
    pids = [p for b in bdfs if (p := pmap.physical(b)) is not None]
    complete = len(pids) == len(bdfs)
    part = topology.partition_for(pids) if complete else None
    return Shape(tuple(sorted(pids)), part, complete)
