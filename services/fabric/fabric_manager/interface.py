"""The one interface the fabric service uses to talk to NVIDIA Fabric Manager.

Two implementations sit behind it, chosen by ``factory.make_fabric_manager``:
``simulator.SimulatedFabricManager`` (the rules of the shared NVSwitch model in
memory) and ``nvfm.NvfmFabricManager`` (a ctypes binding to ``libnvfm.so``).

Semantics follow the Fabric Manager SDK (shared NVSwitch virtualization model):

* ``list_partitions`` = ``fmGetSupportedFabricPartitions``: every partition of
  the table with its GPUs (physical id and PCI bus id) and whether it is active.
  ``supported`` is False for the partitions ``fmGetUnsupportedFabricPartitions``
  names (a GPU in them lost NVLinks).
* ``activate`` / ``deactivate`` = ``fmActivateFabricPartition`` /
  ``fmDeactivateFabricPartition``. Two partitions that share a GPU are never
  active together (``PartitionConflict``); activating an active partition is a
  conflict too (``PartitionAlreadyActive``, a subclass), deactivating an
  inactive one raises ``PartitionNotActive``.
* After a Fabric Manager restart in resiliency mode, Fabric Manager forgets
  which partitions were active and refuses changes (``NotReady``) until the
  caller replays them with ``set_activated_list``
  (= ``fmSetActivatedFabricPartitions``).
* ``nvlink_failed_devices`` = ``fmGetNvlinkFailedDevices``.

Every method may raise ``FabricManagerUnavailable`` when Fabric Manager cannot
be reached. Methods connect on demand: a client whose connection was cut (Fabric
Manager restarted) connects again on its next call, so after a restart callers
see ``NotReady``, not a dead handle. Implementations are safe to call from
several threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from services.fabric.fabric_manager.errors import (  # re-exported for callers
    FabricManagerError,
    FabricManagerUnavailable,
    InvalidArgument,
    NotReady,
    NotSupported,
    PartitionAlreadyActive,
    PartitionConflict,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)

__all__ = [
    "BACKENDS",
    "FabricManager",
    "FabricManagerError",
    "FabricManagerUnavailable",
    "FailedDevice",
    "FailedDevices",
    "GpuInfo",
    "InvalidArgument",
    "NotReady",
    "NotSupported",
    "PartitionAlreadyActive",
    "PartitionConflict",
    "PartitionInfo",
    "PartitionNotActive",
    "PartitionUnsupported",
    "UnknownPartition",
]

BACKENDS: tuple[str, ...] = ("simulator", "nvfm")


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of a partition, as Fabric Manager reports it.

    ``pci_bus_id`` is normalised to the sysfs form ``0000:18:00.0`` (lower case,
    4-digit domain) whatever form the backend returned.
    """

    physical_id: int
    pci_bus_id: str
    uuid: str = ""
    nvlinks_available: int = 0  # NVLinks this GPU gets inside the partition (0 alone)
    max_nvlinks: int = 0  # NVLinks the GPU has in total
    nvlink_line_rate_mbps: int = 0


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of Fabric Manager's table and its current state."""

    id: int
    gpus: tuple[GpuInfo, ...]
    nvlinks: int  # NVLinks inside the partition (sum over its GPUs; 0 for one GPU)
    active: bool
    supported: bool = True

    @property
    def physical_ids(self) -> frozenset[int]:
        return frozenset(g.physical_id for g in self.gpus)

    @property
    def pci_bus_ids(self) -> tuple[str, ...]:
        return tuple(g.pci_bus_id for g in self.gpus)


@dataclass(frozen=True)
class FailedDevice:
    """A GPU or NVSwitch with failed NVLink ports."""

    pci_bus_id: str
    uuid: str = ""
    ports: tuple[int, ...] = ()
    physical_id: int | None = None  # GPUs only, when the backend can tell


@dataclass(frozen=True)
class FailedDevices:
    """``fmGetNvlinkFailedDevices``: GPUs and switches with failed NVLinks."""

    gpus: tuple[FailedDevice, ...] = field(default=())
    switches: tuple[FailedDevice, ...] = field(default=())

    @property
    def gpu_pci_bus_ids(self) -> tuple[str, ...]:
        return tuple(d.pci_bus_id for d in self.gpus)

    def __bool__(self) -> bool:
        return bool(self.gpus or self.switches)


@runtime_checkable
class FabricManager(Protocol):
    """What the fabric service needs from Fabric Manager."""

    backend: str  # "simulator" | "nvfm"

    def connect(self) -> None:
        """Open the connection (fmConnect). Raises FabricManagerUnavailable."""

    def close(self) -> None:
        """Drop the connection (fmDisconnect); idempotent, never raises."""

    def list_partitions(self) -> list[PartitionInfo]:
        """Every partition of the table, sorted by id, with GPUs, NVLinks, active, supported."""

    def activate(self, partition_id: int) -> None:
        """Activate one partition.

        Raises PartitionConflict (overlaps an active partition; PartitionAlreadyActive
        if it is active itself), PartitionUnsupported, UnknownPartition, NotReady,
        FabricManagerUnavailable.
        """

    def deactivate(self, partition_id: int) -> None:
        """Deactivate one partition.

        Raises PartitionNotActive, UnknownPartition, NotReady, FabricManagerUnavailable.
        """

    def set_activated_list(self, partition_ids: list[int]) -> None:
        """Tell a restarted Fabric Manager (resiliency mode) which partitions are active.

        The list becomes the active set as given (an empty list is valid and needed
        when nothing was active); Fabric Manager is ready afterwards. Raises
        UnknownPartition, PartitionConflict (the list overlaps itself), InvalidArgument
        (duplicates, more than 64), FabricManagerUnavailable.
        """

    def nvlink_failed_devices(self) -> FailedDevices:
        """GPUs and NVSwitches with failed NVLinks."""

    def unsupported_partitions(self) -> list[int]:
        """Ids of partitions that cannot be activated (their GPUs lost NVLinks), sorted."""
