"""Pure rules of the shared NVSwitch model that both backends apply (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core import topology
from services.fabric.fabric_manager.errors import (
    InvalidArgument,
    PartitionConflict,
    UnknownPartition,
)

#: Fabric Manager's limit on partitions in one list (FM_MAX_FABRIC_PARTITIONS).
MAX_FABRIC_PARTITIONS = 64


def overlapping_active(
    partition: topology.Partition, active: Sequence[int], table: Mapping[int, topology.Partition]
) -> tuple[int, ...]:
    """Active partitions (ids, sorted) that share a GPU with ``partition``."""
    return tuple(sorted(a for a in active if table[a].overlaps(partition)))


def check_activated_list(ids: Sequence[int], table: Mapping[int, topology.Partition]) -> None:
    """Refuse an activated list Fabric Manager would refuse: too long, duplicates,
    unknown ids, or two partitions sharing a GPU."""
    if len(ids) > MAX_FABRIC_PARTITIONS:
        raise InvalidArgument(f"partition_ids: at most {MAX_FABRIC_PARTITIONS} partitions, got {len(ids)}")
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if list(ids).count(i) > 1})
        raise InvalidArgument(f"partition_ids: duplicate id(s) {dupes}")
    for pid in ids:
        if pid not in table:
            raise UnknownPartition(pid, f"partition_ids: no fabric partition {pid}; ids are {sorted(table)}")
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            if table[a].overlaps(table[b]):
                raise PartitionConflict(
                    a,
                    f"partition_ids: partitions {a} and {b} share GPUs and cannot both be active",
                    conflicting=(b,),
                )
