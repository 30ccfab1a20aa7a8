"""A Fabric Manager simulator with the rules of the shared NVSwitch model.

Real NVSwitch boards cannot be had here, so the fabric service runs against
this simulator everywhere but on GPU nodes. It plays one Fabric Manager
instance (``SimulatedFabric``: the partition table, which partitions are
active, failed NVLinks, whether the process is up) and hands out clients
(``SimulatedFabricManager``) that implement ``interface.FabricManager`` the way
the libnvfm binding does.

Rules, as Fabric Manager applies them (and as ``libnvfm_fake`` in the tests
applies them too, so both backends agree):

* the table is HGX H100's default partition table (``core.topology``);
  GPUs are known by physical id and PCI bus id (from a board description);
* two partitions that share a GPU are never active together; activating an
  active partition is refused as in use;
* a GPU with failed NVLinks makes every partition that contains it
  unsupported (refused on activation); partitions already active stay active
  until deactivated, as the hardware keeps them;
* a restart (``restart()``, or ``stop()`` then ``start()``) makes Fabric
  Manager forget which partitions are active; in resiliency (restart) mode it
  then refuses activation and deactivation (``NotReady``) until the caller
  sets the activated list, which becomes the active set as given;
* while stopped every call fails with ``FabricManagerUnavailable``; a client
  whose connection was cut reconnects on its next call once Fabric Manager is
  up again.

Fabric Manager modes, per the NVIDIA Fabric Manager User Guide (each rule is
listed with its section in docs/fabric-manager.md; the compiled C double in
tests/fabric/fabric_manager/libnvfm_fake applies the same rules):

* restart mode (``FABRIC_MODE_RESTART=1``, "Fabric Manager Restart Mode" and
  "Resiliency" of the Shared NVSwitch model): until the activated list arrives,
  every call but ``set_activated_list`` is refused (``NotReady``); without the
  list within ``restart_timeout_s`` (60 s) Fabric Manager exits;
  ``nvlink_failed_devices`` is not supported in restart mode (``NotSupported``);
* ``set_activated_list`` is only accepted after a restart (``NotSupported``
  otherwise);
* ``h100=True`` (DGX/HGX H100, "GPU Partitions"): partition info carries no
  UUID and no PCI bus id (the host maps physical id = module id to PCI); the
  supported list ignores GPU degradation, the unsupported and failed-device
  lists are empty; a degraded GPU shows as fewer ``nvlinks_available``.
  Without ``h100`` the simulator keeps the A100-era behaviour (degraded GPUs
  make their partitions unsupported and are listed as failed).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from core import topology
from services.fabric.fabric_manager import rules
from services.fabric.fabric_manager.errors import (
    FabricManagerUnavailable,
    NotReady,
    NotSupported,
    PartitionAlreadyActive,
    PartitionConflict,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)
from services.fabric.fabric_manager.interface import (
    FailedDevice,
    FailedDevices,
    GpuInfo,
    PartitionInfo,
)
from services.fabric.fabric_manager.pci import normalize_pci_bus_id

logger = logging.getLogger(__name__)

#: Per-NVLink line rate an H100 reports (NVLink 4, MB/s).
H100_NVLINK_LINE_RATE_MBPS = 26562
#: Ports on an NVSwitch (third generation) / NVLinks on an H100.
NVSWITCH_PORTS = 64


def default_gpu_map() -> dict[int, str]:
    """Physical id -> PCI bus id of the reference DGX H100 board (the fake sysfs one)."""
    from core.platforms import DGX_H100

    return DGX_H100.physical_id_to_bdf()


def default_switches() -> tuple[str, ...]:
    from core.platforms import DGX_H100

    return DGX_H100.nvswitch_bdfs


@functools.lru_cache(maxsize=256)
def gpu_uuid(pci_bus_id: str) -> str:
    """A stable, made-up GPU UUID for a PCI address (the simulator has no real ones).

    Cached: every partition listing names each GPU, and ``uuid5`` costs a SHA-1."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpucaas-sim:{pci_bus_id}"))


class SimulatedFabric:
    """One simulated Fabric Manager instance: its state and its failure switches.

    ``resiliency``: started with ``--restart`` semantics (the shared NVSwitch
    resiliency mode gpucaas configures); after a restart, activation waits for
    the activated list. Without it a restart simply comes back with nothing
    active and ready.
    """

    def __init__(
        self,
        gpus: Mapping[int, str] | None = None,
        *,
        partitions: Sequence[topology.Partition] = topology.HGX_H100_PARTITIONS,
        switches: Iterable[str] | None = None,
        nvlinks_per_gpu: int = topology.NVLINKS_PER_GPU,
        resiliency: bool = True,
        h100: bool = False,
        restart_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        gpu_map = default_gpu_map() if gpus is None else dict(gpus)
        self._gpus = {int(p): normalize_pci_bus_id(b) for p, b in gpu_map.items()}
        self._partitions = {p.id: p for p in partitions}
        needed = {g for p in partitions for g in p.gpus}
        missing = needed - set(self._gpus)
        if missing:
            raise ValueError(
                f"gpus: no PCI bus id for physical id(s) {sorted(missing)} used by the "
                f"partition table; give one for each of {sorted(needed)}"
            )
        self._switches = tuple(normalize_pci_bus_id(s) for s in (default_switches() if switches is None else switches))
        self._nvlinks_per_gpu = nvlinks_per_gpu
        self.resiliency = resiliency
        self.h100 = h100
        self.restart_timeout_s = restart_timeout_s
        self._clock = clock
        self._restart_mode = False
        self._list_deadline = 0.0
        self.exits_without_list = 0
        self.lock = threading.RLock()
        self._active: set[int] = set()
        self._gpu_failures: dict[int, tuple[int, ...]] = {}
        #: each partition's GpuInfo entries (frozen), built once per NVLink failure change:
        #: every activation lists all partitions first, as the real flow does.
        self._gpu_infos: dict[int, tuple[GpuInfo, ...]] = {}
        self._switch_failures: dict[str, tuple[int, ...]] = {}
        self._running = True
        self._awaiting_list = False
        #: bumped whenever the process goes away: connections of an older epoch are dead.
        self.epoch = 0
        self.restarts = 0

    # --- what tests and the sandbox use to play events --------------------------------
    @property
    def running(self) -> bool:
        with self.lock:
            self._check_list_deadline()
            return self._running

    @property
    def restart_mode(self) -> bool:
        """This Fabric Manager process started with FABRIC_MODE_RESTART=1."""
        return self._restart_mode

    def _check_list_deadline(self) -> None:
        """Restart mode: no activated list within the timeout -> Fabric Manager exits
        (FM User Guide, "Fabric Manager Restart Mode")."""
        if self._running and self._awaiting_list and self._clock() > self._list_deadline:
            logger.warning(
                "simulated fabric manager: no activated partition list within %.0f s in restart mode; exiting",
                self.restart_timeout_s,
            )
            self.exits_without_list += 1
            self._awaiting_list = False
            self._running = False
            self.epoch += 1
            self._active.clear()

    @property
    def awaiting_activated_list(self) -> bool:
        with self.lock:
            self._check_list_deadline()
            return self._awaiting_list

    @property
    def gpu_map(self) -> dict[int, str]:
        return dict(self._gpus)

    def active_partition_ids(self) -> frozenset[int]:
        """The partitions Fabric Manager holds active now (empty while it has forgotten)."""
        with self.lock:
            return frozenset(self._active)

    def stop(self) -> None:
        """The Fabric Manager process goes away (service VM down, crash)."""
        with self.lock:
            if self._running:
                self._running = False
                self.epoch += 1
                self._active.clear()
                logger.info("simulated fabric manager stopped")

    def start(self, restart_mode: bool | None = None) -> None:
        """The process comes back; it remembers nothing of the partitions it had active.
        ``restart_mode`` (default: ``resiliency``): started with FABRIC_MODE_RESTART=1."""
        with self.lock:
            if self._running:
                return
            self._running = True
            self._active.clear()
            self.restarts += 1
            mode = self.resiliency if restart_mode is None else restart_mode
            self._awaiting_list = mode
            self._restart_mode = mode
            self._list_deadline = self._clock() + self.restart_timeout_s
            logger.info(
                "simulated fabric manager started (restart %d, %s)",
                self.restarts,
                "waiting for the activated partition list" if self._awaiting_list else "ready",
            )

    def restart(self, restart_mode: bool | None = None) -> None:
        """Stop then start: an FM restart (in restart mode, NotReady until the list is set)."""
        with self.lock:
            self.stop()
            self.start(restart_mode)

    def inject_gpu_nvlink_failure(self, physical_id: int, ports: Iterable[int] = (0,)) -> None:
        """A GPU loses NVLinks (added to those failed before): every partition
        containing it becomes unsupported."""
        self._check_gpu(physical_id)
        with self.lock:
            self._gpu_failures[physical_id] = self._ports(
                (*self._gpu_failures.get(physical_id, ()), *self._ports(ports))
            )
            self._gpu_infos.clear()
            logger.info("simulated NVLink failure on GPU %d (%s)", physical_id, self._gpus[physical_id])

    def clear_gpu_nvlink_failure(self, physical_id: int) -> None:
        self._check_gpu(physical_id)
        with self.lock:
            self._gpu_failures.pop(physical_id, None)
            self._gpu_infos.clear()

    def inject_switch_nvlink_failure(self, pci_bus_id: str, ports: Iterable[int] = (0,)) -> None:
        """An NVSwitch reports failed ports (listed in failed devices; partitions unaffected)."""
        bdf = normalize_pci_bus_id(pci_bus_id)
        if bdf not in self._switches:
            raise ValueError(f"pci_bus_id: {pci_bus_id!r} is not an NVSwitch here; allowed: {list(self._switches)}")
        with self.lock:
            self._switch_failures[bdf] = self._ports((*self._switch_failures.get(bdf, ()), *self._ports(ports)))

    def clear_switch_nvlink_failure(self, pci_bus_id: str) -> None:
        with self.lock:
            self._switch_failures.pop(normalize_pci_bus_id(pci_bus_id), None)

    def _check_gpu(self, physical_id: int) -> None:
        if physical_id not in self._gpus:
            raise ValueError(f"physical_id: no GPU {physical_id}; allowed: {sorted(self._gpus)}")

    @staticmethod
    def _ports(ports: Iterable[int]) -> tuple[int, ...]:
        out = tuple(sorted({int(p) for p in ports}))
        if not out or any(not 0 <= p < NVSWITCH_PORTS for p in out):
            raise ValueError(f"ports: give 1..{NVSWITCH_PORTS} port numbers in 0..{NVSWITCH_PORTS - 1}")
        return out

    # --- the Fabric Manager API, as the clients call it ---------------------------------
    def _require_running(self) -> None:
        self._check_list_deadline()
        if not self._running:
            raise FabricManagerUnavailable("fabric manager is not running (simulated)")

    def _require_ready(self, what: str) -> None:
        if self._awaiting_list:
            raise NotReady(
                f"{what} refused: fabric manager restarted and waits for the activated "
                "partition list (set_activated_list)"
            )

    def _partition(self, partition_id: int) -> topology.Partition:
        try:
            return self._partitions[partition_id]
        except (KeyError, TypeError):
            raise UnknownPartition(
                partition_id,
                f"no fabric partition {partition_id}; ids are {sorted(self._partitions)}",
            ) from None

    def _unsupported_ids(self) -> set[int]:
        if self.h100:  # H100: the supported list ignores GPU degradation
            return set()
        bad = set(self._gpu_failures)
        return {pid for pid, p in self._partitions.items() if p.gpus & bad}

    def list_partitions(self) -> list[PartitionInfo]:
        with self.lock:
            self._require_running()
            self._require_ready("listing partitions")
            unsupported = self._unsupported_ids()
            return [
                self._info(p, pid in self._active, pid not in unsupported)
                for pid, p in sorted(self._partitions.items())
            ]

    def _info(self, p: topology.Partition, active: bool, supported: bool) -> PartitionInfo:
        gpus = self._gpu_infos.get(p.id)
        if gpus is None:
            gpus = self._gpu_infos[p.id] = self._gpu_entries(p)
        return PartitionInfo(
            id=p.id,
            gpus=gpus,
            nvlinks=sum(g.nvlinks_available for g in gpus),
            active=active,
            supported=supported,
        )

    def _gpu_entries(self, p: topology.Partition) -> tuple[GpuInfo, ...]:
        multi = p.size > 1
        gpus = []
        for g in p.sorted_gpus():
            failed = len(self._gpu_failures.get(g, ()))
            available = max(self._nvlinks_per_gpu - failed, 0) if multi else 0
            pci = "" if self.h100 else self._gpus[g]  # H100: no PCI bus id, no UUID
            gpus.append(
                GpuInfo(
                    physical_id=g,
                    pci_bus_id=pci,
                    uuid=gpu_uuid(pci) if pci else "",
                    nvlinks_available=available,
                    max_nvlinks=self._nvlinks_per_gpu,
                    nvlink_line_rate_mbps=H100_NVLINK_LINE_RATE_MBPS,
                )
            )
        return tuple(gpus)

    def activate(self, partition_id: int) -> None:
        with self.lock:
            self._require_running()
            self._require_ready(f"activating partition {partition_id}")
            part = self._partition(partition_id)
            if partition_id in self._unsupported_ids():
                bad = sorted(part.gpus & set(self._gpu_failures))
                raise PartitionUnsupported(
                    partition_id,
                    f"partition {partition_id} is unsupported: GPU(s) {bad} have failed NVLinks",
                )
            if partition_id in self._active:
                raise PartitionAlreadyActive(partition_id)
            conflicting = rules.overlapping_active(part, sorted(self._active), self._partitions)
            if conflicting:
                raise PartitionConflict(partition_id, conflicting=conflicting)
            self._active.add(partition_id)
            logger.info("simulated fabric manager activated partition %d (GPUs %s)", partition_id, part.sorted_gpus())

    def deactivate(self, partition_id: int) -> None:
        with self.lock:
            self._require_running()
            self._require_ready(f"deactivating partition {partition_id}")
            self._partition(partition_id)
            if partition_id not in self._active:
                raise PartitionNotActive(partition_id)
            self._active.discard(partition_id)
            logger.info("simulated fabric manager deactivated partition %d", partition_id)

    def set_activated_list(self, partition_ids: Sequence[int]) -> None:
        ids = list(partition_ids)
        with self.lock:
            self._require_running()
            if not self._awaiting_list:
                raise NotSupported(
                    "set_activated_list refused: Fabric Manager only takes the "
                    "activated list after a restart in restart mode"
                )
            rules.check_activated_list(ids, self._partitions)
            self._active = set(ids)
            self._awaiting_list = False
            logger.info("simulated fabric manager activated list set to %s", sorted(ids))

    def nvlink_failed_devices(self) -> FailedDevices:
        with self.lock:
            self._require_running()
            if self._restart_mode:
                raise NotSupported("fmGetNvlinkFailedDevices is not supported in restart mode")
            if self.h100:
                return FailedDevices()  # H100: always empty
            return FailedDevices(
                gpus=tuple(
                    FailedDevice(pci_bus_id=self._gpus[g], uuid=gpu_uuid(self._gpus[g]), ports=ports, physical_id=g)
                    for g, ports in sorted(self._gpu_failures.items())
                ),
                switches=tuple(
                    FailedDevice(pci_bus_id=s, ports=ports) for s, ports in sorted(self._switch_failures.items())
                ),
            )

    def unsupported_partitions(self) -> list[int]:
        with self.lock:
            self._require_running()
            self._require_ready("listing unsupported partitions")
            return sorted(self._unsupported_ids())


class SimulatedFabricManager:
    """A client of a ``SimulatedFabric``; implements ``interface.FabricManager``."""

    backend = "simulator"

    def __init__(self, fabric: SimulatedFabric | None = None) -> None:
        self.fabric = fabric if fabric is not None else SimulatedFabric()
        self._epoch: int | None = None  # epoch of the live connection, None when closed
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SimulatedFabricManager(connected={self._epoch is not None})"

    # convenience: the fabric's event switches, reachable from the client
    def stop(self) -> None:
        self.fabric.stop()

    def start(self) -> None:
        self.fabric.start()

    def restart(self) -> None:
        self.fabric.restart()

    def connect(self) -> None:
        with self._lock, self.fabric.lock:
            if not self.fabric.running:
                self._epoch = None
                raise FabricManagerUnavailable("cannot connect: fabric manager is not running (simulated)")
            self._epoch = self.fabric.epoch

    def close(self) -> None:
        with self._lock:
            self._epoch = None

    def _ensure(self) -> None:
        """Reconnect when the connection is gone (never made, closed, or cut by a stop)."""
        with self._lock, self.fabric.lock:
            if self._epoch is not None and self._epoch == self.fabric.epoch:
                return
            if not self.fabric.running:
                self._epoch = None
                raise FabricManagerUnavailable("fabric manager is not running (simulated)")
            self._epoch = self.fabric.epoch

    def list_partitions(self) -> list[PartitionInfo]:
        self._ensure()
        return self.fabric.list_partitions()

    def activate(self, partition_id: int) -> None:
        self._ensure()
        self.fabric.activate(partition_id)

    def deactivate(self, partition_id: int) -> None:
        self._ensure()
        self.fabric.deactivate(partition_id)

    def set_activated_list(self, partition_ids: list[int]) -> None:
        self._ensure()
        self.fabric.set_activated_list(partition_ids)

    def nvlink_failed_devices(self) -> FailedDevices:
        self._ensure()
        return self.fabric.nvlink_failed_devices()

    def unsupported_partitions(self) -> list[int]:
        self._ensure()
        return self.fabric.unsupported_partitions()
