"""The state every job of :class:`~services.fabric.partitions.PartitionService` shares, and
its one way of calling Fabric Manager.

:class:`FabricConnection` holds Fabric Manager, the activation records, the host layout, the
:class:`~services.fabric.status.FabricStatus`, the change listeners and the one lock that
serialises every change. ``_call`` connects on demand and, when a restarted Fabric Manager
waits for its activated list (``NotReady``), replays it (``replay.py``) and retries once.

GPU identity: on H100 Fabric Manager's partition info has empty PCI bus ids (physical id =
module id); ``_partitions`` fills them from the host's platform layout
(``core.platforms``), the one mapping every consumer reads through ``/v1/topology``
and FabricState.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from core.platforms import PlatformLayout
from services.fabric.bookkeeping import ActivationStore
from services.fabric.errors import Unavailable
from services.fabric.fabric_manager.interface import (
    FabricManager,
    FabricManagerUnavailable,
    NotReady,
    PartitionInfo,
)
from services.fabric.status import FabricStatus

log = logging.getLogger(__name__)

T = TypeVar("T")


class FabricConnection:
    """Fabric Manager, the records and the lock; the base of the service's jobs. Thread-safe."""

    def __init__(
        self,
        fm: FabricManager,
        store: ActivationStore,
        *,
        on_change: Callable[[], None] | None = None,
        layout: PlatformLayout | None = None,
        gpu_reset: Callable[[tuple[str, ...]], None] | None = None,
        sysfs_root: Any = None,
    ) -> None:
        self.fm = fm
        self.store = store
        self.layout = layout
        self._layout_pci = layout.physical_id_to_bdf() if layout else {}
        self.gpu_reset = gpu_reset
        self.sysfs_root = sysfs_root  # shown beside the layout: what sysfs says of each GPU
        self._fm_pci_ids: set[int] = set()  # physical ids Fabric Manager gave a PCI bus id for
        self.status = FabricStatus()
        self._lock = threading.RLock()
        self._on_change = [on_change] if on_change else []
        self._connected = False

    @property
    def backend(self) -> str:
        return getattr(self.fm, "backend", type(self.fm).__name__)

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._on_change.append(fn)

    def _changed(self) -> None:
        for fn in list(self._on_change):
            try:
                fn()
            except Exception:  # a listener never breaks an allocation
                log.exception("fabric change listener failed")

    # --- Fabric Manager calls -------------------------------------------------------
    def _ensure_connected(self) -> None:
        if not self._connected:
            try:
                self.fm.connect()
            except FabricManagerUnavailable as exc:
                self._unreachable(exc)
                raise Unavailable(f"Fabric Manager ({self.backend}) unreachable: {exc}") from exc
            self._connected = True

    def _unreachable(self, exc: Exception) -> None:
        self.status.reachable = False
        self.status.message = str(exc)
        if self._connected:
            self.fm.close()
            self._connected = False

    def _replay_locked(self) -> list[int]:
        """Tell Fabric Manager the active list; the replay job's (``replay.py``)."""
        raise NotImplementedError

    def _call(self, fn: Callable[[], T], *, replay_on_not_ready: bool = True) -> T:
        """One Fabric Manager call: connect if needed; after a restart (NotReady) replay and retry once."""
        self._ensure_connected()
        try:
            try:
                result = fn()
            except NotReady:
                if not replay_on_not_ready:
                    raise
                log.warning("Fabric Manager is waiting for the activated list (restarted): replaying")
                self._replay_locked()
                result = fn()
        except FabricManagerUnavailable as exc:
            self._unreachable(exc)
            raise Unavailable(f"Fabric Manager ({self.backend}) unreachable: {exc}") from exc
        except NotReady as exc:
            raise Unavailable(f"Fabric Manager not ready: {exc}") from exc
        self.status.reachable = True
        self.status.message = ""
        return result

    def _partitions(self) -> list[PartitionInfo]:
        return [self._with_host_pci(p) for p in self._call(self.fm.list_partitions)]

    def _with_host_pci(self, p: PartitionInfo) -> PartitionInfo:
        """Fill empty PCI bus ids (H100) from the host layout; Fabric Manager's own wins when given."""
        self._fm_pci_ids |= {g.physical_id for g in p.gpus if g.pci_bus_id}
        if not self._layout_pci or all(g.pci_bus_id for g in p.gpus):
            return p
        gpus = tuple(
            g if g.pci_bus_id else replace(g, pci_bus_id=self._layout_pci.get(g.physical_id, "")) for g in p.gpus
        )
        return replace(p, gpus=gpus)

    def reconnect(self, timeout_s: float, interval_s: float = 0.5) -> None:
        """Drop the connection and connect again, waiting up to ``timeout_s`` (FM booting)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if self._connected:
                self.fm.close()
                self._connected = False
        while True:
            try:
                with self._lock:
                    self._ensure_connected()
                    self.fm.list_partitions()
                    return
            except (Unavailable, FabricManagerUnavailable) as exc:
                with self._lock:
                    self._unreachable(exc)
                if time.monotonic() >= deadline:
                    raise Unavailable(f"Fabric Manager not back after {timeout_s}s: {exc}") from exc
            except NotReady:
                return  # reachable, waiting for the activated list
            time.sleep(interval_s)
