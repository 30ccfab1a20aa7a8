"""What the fabric service answers without changing anything: Fabric Manager's partitions
with their holders, the GPU topology and health, the activation records, and the check of
the host's platform layout against Fabric Manager's partition table."""

from __future__ import annotations

import logging
from typing import Any

from core import fabric_messages as fm
from core.platforms import validate_against_table
from services.fabric.connection import FabricConnection
from services.fabric.errors import Unavailable
from services.fabric.fabric_manager.interface import FailedDevices, NotSupported, PartitionInfo
from services.fabric.views import activation_view

log = logging.getLogger(__name__)


class QueriesMixin(FabricConnection):
    """The read-only answers of the partition service."""

    def validate_layout(self) -> list[str]:
        """Compare the host layout with Fabric Manager's table (and FM's PCI ids, where it
        gives them); the problems are kept in ``status.layout_problems`` and returned."""
        if self.layout is None:
            return []
        with self._lock:
            raw = self._call(self.fm.list_partitions)
        problems = validate_against_table(self.layout, [p.physical_ids for p in raw])
        for p in raw:
            for g in p.gpus:
                mapped = self._layout_pci.get(g.physical_id)
                if g.pci_bus_id and mapped and g.pci_bus_id != mapped:
                    problems.append(
                        f"GPU {g.physical_id}: Fabric Manager says {g.pci_bus_id}, "
                        f"layout {self.layout.name} says {mapped}"
                    )
        problems = sorted(set(problems))
        self.status.layout_problems = problems
        for line in problems:
            log.error("platform layout: %s", line)
        return problems

    def list_partitions(self) -> list[fm.Partition]:
        with self._lock:
            parts = self._partitions()
            return [self._partition_view(p) for p in parts]

    def _partition_view(self, p: PartitionInfo) -> fm.Partition:
        rec = self.store.book.holder_of(p.id)
        return {
            "id": p.id,
            "gpus": [{"physical_id": g.physical_id, "pci_bus_id": g.pci_bus_id} for g in p.gpus],
            "nvlinks": p.nvlinks,
            "active": p.active,
            "supported": p.supported,
            "holder": rec.holder if rec else None,
        }

    def failed_devices(self) -> Any:
        """fmGetNvlinkFailedDevices, or an empty answer where Fabric Manager does not support it
        (restart mode; FM User Guide, "Fabric Manager Restart Mode")."""
        try:
            return self._call(self.fm.nvlink_failed_devices)
        except NotSupported:
            return FailedDevices()

    def topology(self) -> fm.Topology:
        """GPUs by physical id with their PCI address (host layout where FM gives none) and
        health: failed NVLinks where FM lists them, else degradation seen as fewer NVLinks
        available than the GPU has (how H100 shows it: its failed list is always empty)."""
        with self._lock:
            parts = self._partitions()
            failed = self.failed_devices()
        reasons = {
            d.pci_bus_id: f"NVLink failure on ports {list(d.ports)}" if d.ports else "NVLink failure"
            for d in failed.gpus
        }
        gpus: dict[int, str] = {}
        degraded: dict[int, str] = {}
        for p in parts:
            for g in p.gpus:
                gpus[g.physical_id] = g.pci_bus_id
                if len(p.gpus) > 1 and g.max_nvlinks and g.nvlinks_available < g.max_nvlinks:
                    degraded[g.physical_id] = (
                        f"NVLink degraded: {g.nvlinks_available} of {g.max_nvlinks} NVLinks available"
                    )
        from_fm = set(self._fm_pci_ids)
        out: list[fm.TopologyGpu] = []
        for pid, pci in sorted(gpus.items()):
            reason = reasons.get(pci) or degraded.get(pid)
            out.append(
                {
                    "physical_id": pid,
                    "pci_bus_id": pci or None,
                    "healthy": reason is None,
                    "reason": reason,
                    "pci_source": "fabric-manager" if pid in from_fm else ("layout" if pci else "unknown"),
                }
            )
        return {
            "source": "fabric-manager",
            "gpus": out,
            "layout": self.layout.view(self.sysfs_root) if self.layout else None,
            "layout_problems": self.status.layout_problems or [],
        }

    def activations(self) -> list[fm.ActivationRecord]:
        with self._lock:
            return [activation_view(a) for a in self.store.book]

    def lost(self) -> list[fm.ActivationRecord]:
        with self._lock:
            return [activation_view(a) for a in self.store.book.lost()]

    def failed_gpus(self) -> list[str]:
        with self._lock:
            failed = self.failed_devices()  # empty where FM does not support it (restart mode)
            return sorted(failed.gpu_pci_bus_ids)

    def probe(self) -> bool:
        """Is Fabric Manager reachable now? Updates ``status``; never raises."""
        with self._lock:
            try:
                self._partitions()
            except Unavailable:
                return False
            return True
