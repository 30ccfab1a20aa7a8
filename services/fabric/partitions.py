"""Partitions follow allocations: the fabric service's domain logic.

:class:`PartitionService` joins Fabric Manager (any ``FabricManager``
implementation) and the activation records (``bookkeeping``):

- ``activate(holder, gpus)``: the partitions the GPU set needs
  (``core.topology.partitions_for_gpus``: the set's own partition, or
  one single-GPU partition per GPU) are activated for ``holder``; idempotent for
  the same holder and set; refused with :class:`Conflict` naming the other holder
  when a needed partition overlaps one that is active or held.
- ``release(holder)``, ``sync(live, grace)``: deactivate what a holder held.
- ``replay()``: after a Fabric Manager (or service VM) restart, tell it the
  active list again (``set_activated_list``).
- ``reconcile()``: the periodic check that brings Fabric Manager back in line
  with the records (replay after a restart, finish pending releases).
- ``fabric_reset(reason)``: the service VM restarted, which resets the NVSwitches
  (managed hostdevs go through a vfio reset): every partition active before is
  gone and cannot be replayed. The records are marked *lost* (the holders are
  reported; see ``main`` for the Event, conditions and the pod policy), and
  Fabric Manager is told that nothing is active.

GPU identity: on H100 Fabric Manager's partition info has empty PCI bus ids
(physical id = module id); the service fills them from the host's platform
layout (``core.platforms``), the one mapping every consumer reads through
``/v1/topology`` and FabricState.

GPU reset: before a holder's partitions are activated its GPUs are reset through
sysfs (``gpu_reset`` hook, ``core.gpu_reset``); after release the GPU-lease
agent resets them right before the firmware check.

Consistency: one lock serialises every change, so two racing allocations are
decided one after the other -- exactly one wins. A record is written before
Fabric Manager is asked and removed only after deactivation; a multi-partition
activation that fails half-way is rolled back before the error is returned, and
if even the rollback cannot reach Fabric Manager the record is kept as
``releasing`` so ``reconcile`` finishes it. Nothing is left half-activated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

from core import topology
from core.platforms import PlatformLayout, validate_against_table
from services.fabric.bookkeeping import Activation, ActivationStore, utcnow
from services.fabric.discovery import normalize_bdf
from services.fabric.errors import Conflict, InvalidRequest, NotFound, Unavailable, Unsupported
from services.fabric.fabric_manager.interface import (
    FabricManager,
    FabricManagerError,
    FabricManagerUnavailable,
    NotReady,
    NotSupported,
    PartitionAlreadyActive,
    PartitionConflict,
    PartitionInfo,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)

log = logging.getLogger(__name__)

ADMIN_HOLDER_PREFIX = "admin:partition-"
MAX_HOLDER_LEN = 512
T = TypeVar("T")


@dataclass
class FabricStatus:
    """What the service knows about Fabric Manager, for health and publishing."""

    reachable: bool = False
    message: str = ""
    replays: int = 0
    last_replay_at: datetime | None = None
    last_replay_s: float | None = None
    fabric_resets: int = 0
    last_fabric_reset_at: datetime | None = None
    layout_problems: list[str] | None = None


class PartitionService:
    """Activation bookkeeping on top of Fabric Manager. Thread-safe."""

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

    # --- queries ----------------------------------------------------------------------
    def list_partitions(self) -> list[dict[str, Any]]:
        with self._lock:
            parts = self._partitions()
            return [self._partition_view(p) for p in parts]

    def _partition_view(self, p: PartitionInfo) -> dict[str, Any]:
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
        from services.fabric.fabric_manager.interface import FailedDevices

        try:
            return self._call(self.fm.nvlink_failed_devices)
        except NotSupported:
            return FailedDevices()

    def topology(self) -> dict[str, Any]:
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
        out = []
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

    def activations(self) -> list[dict[str, Any]]:
        with self._lock:
            return [activation_view(a) for a in self.store.book]

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

    # --- allocations --------------------------------------------------------------------
    def _resolve(self, parts: list[PartitionInfo], gpus: Iterable[str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
        by_pci: dict[str, int] = {}
        for p in parts:
            for g in p.gpus:
                by_pci[g.pci_bus_id] = g.physical_id
        pcis = []
        for raw in gpus:
            try:
                pcis.append(normalize_bdf(str(raw), field="gpus"))
            except ValueError as exc:
                raise InvalidRequest(str(exc)) from None
        if not pcis:
            raise InvalidRequest("gpus: give at least one GPU PCI address")
        if len(set(pcis)) != len(pcis):
            raise InvalidRequest(f"gpus: duplicate PCI addresses in {pcis}")
        unknown = [p for p in pcis if p not in by_pci]
        if unknown:
            raise InvalidRequest(f"gpus: {unknown} not known to Fabric Manager (known: {sorted(by_pci)})")
        pcis.sort()
        return tuple(pcis), tuple(sorted(by_pci[p] for p in pcis))

    def _needed(self, parts: list[PartitionInfo], physical_ids: tuple[int, ...]) -> list[PartitionInfo]:
        by_id = {p.id: p for p in parts}
        out = []
        for want in topology.partitions_for_gpus(physical_ids):
            have = by_id.get(want.id)
            if have is None or have.physical_ids != want.gpus:
                raise Unavailable(
                    f"Fabric Manager's partition table does not have partition {want.id} "
                    f"= GPUs {want.sorted_gpus()} (not an HGX H100 table?)"
                )
            out.append(have)
        return out

    def _blockers(self, parts: list[PartitionInfo], needed: list[PartitionInfo], holder: str | None) -> list[str]:
        """Who holds what overlaps ``needed`` (active in Fabric Manager or held in the records)."""
        by_id = {p.id: p for p in parts}
        busy = {p.id for p in parts if p.active} | set(self.store.book.held())
        out = []
        for n in needed:
            for pid in sorted(busy):
                other = by_id.get(pid)
                if other is None or not (other.physical_ids & n.physical_ids):
                    continue
                rec = self.store.book.holder_of(pid)
                if rec is not None and rec.holder == holder:
                    continue
                who = describe_holder(rec) if rec else "no holder (active in Fabric Manager, unrecorded)"
                out.append(f"partition {pid} (GPUs {sorted(other.physical_ids)}) held by {who}")
        return sorted(set(out))

    def activate(self, holder: str, gpus: Iterable[str], pod: str | None = None) -> dict[str, Any]:
        """Activate the partitions ``gpus`` need for ``holder``; see the module docstring."""
        check_holder(holder)
        with self._lock:
            parts = self._partitions()
            pcis, physical = self._resolve(parts, gpus)
            existing = self.store.book.get(holder)
            if existing is not None and existing.lost is not None:
                self._release_locked(existing)  # a lost record: its partitions are gone
                existing = None
            if existing is not None and existing.releasing:
                self._release_locked(existing)
                existing = self.store.book.get(holder)
                if existing is not None:
                    raise Unavailable(f"holder {holder} is still being released; retry")
                parts = self._partitions()
            if existing is not None:
                if existing.gpus != pcis:
                    raise Conflict(
                        f"holder {holder} already holds GPUs {list(existing.gpus)}; release it before "
                        f"asking for {list(pcis)}",
                        holder=holder,
                    )
                self._activate_missing(existing, parts)
                return result_view(existing)
            needed = self._needed(parts, physical)
            unsupported = [p.id for p in needed if not p.supported]
            if unsupported:
                raise Unsupported(
                    f"partition(s) {unsupported} for GPUs {list(pcis)} are unsupported "
                    "by Fabric Manager (NVLink failure)"
                )
            blockers = self._blockers(parts, needed, holder)
            if blockers:
                raise Conflict(
                    f"GPUs {list(pcis)} need a partition that overlaps: " + "; ".join(blockers), holder=blockers[0]
                )
            rec = Activation(
                holder=holder,
                gpus=pcis,
                partition_ids=tuple(sorted(p.id for p in needed)),
                physical_ids=physical,
                pod=pod,
                since=utcnow(),
                nvlink=len(needed) == 1 and needed[0].nvlinks > 0,
            )
            self.store.put(rec)  # write-ahead: recorded before Fabric Manager is asked
            todo = [p for p in needed if not p.active]
            if todo:
                self._reset_gpus(rec)
            self._activate_all(rec, todo)
            log.info("activated partitions %s for %s (GPUs %s)", list(rec.partition_ids), holder, list(pcis))
        self._changed()
        return result_view(rec)

    def _reset_gpus(self, rec: Activation) -> None:
        """Reset the holder's GPUs before activation (the hypervisor's part of the Shared
        NVSwitch model); a GPU that cannot be reset is not handed out."""
        if self.gpu_reset is None:
            return
        try:
            self.gpu_reset(rec.gpus)
        except Exception as exc:
            self.store.remove(rec.holder)
            raise Unavailable(f"GPU reset before activation failed for {rec.holder}: {exc}") from exc

    def _activate_all(self, rec: Activation, todo: list[PartitionInfo]) -> None:
        done: list[int] = []
        try:
            for p in todo:
                try:
                    self._call(partial(self.fm.activate, p.id))
                except PartitionAlreadyActive:
                    pass  # a replay on the way (NotReady) activated it from our write-ahead record
                done.append(p.id)
        except (FabricManagerError, Unavailable) as exc:
            self._rollback(rec, done)
            raise _translate(exc, rec.holder) from exc

    def _rollback(self, rec: Activation, done: list[int]) -> None:
        """Undo a half-done activation; if that fails too, leave it to reconcile as 'releasing'."""
        try:
            for pid in reversed(done):
                self._deactivate_quiet(pid)
        except (FabricManagerError, Unavailable) as exc:
            log.error("rollback of %s failed (%s); kept as releasing for reconcile", rec.holder, exc)
            self.store.mark_releasing(rec.holder)
            return
        self.store.remove(rec.holder)

    def _deactivate_quiet(self, pid: int) -> None:
        """Deactivate; 'not active' and 'forgotten by a restart' both count as done."""
        try:
            self._call(lambda: self.fm.deactivate(pid), replay_on_not_ready=False)
        except (PartitionNotActive, UnknownPartition):
            pass
        except Unavailable as exc:
            if isinstance(exc.__cause__, NotReady):
                return  # restarted Fabric Manager forgot it; replay will not bring it back
            raise

    def _activate_missing(self, rec: Activation, parts: list[PartitionInfo]) -> None:
        active = {p.id for p in parts if p.active}
        for pid in rec.partition_ids:
            if pid not in active:
                try:
                    self._call(partial(self.fm.activate, pid))
                except PartitionAlreadyActive:
                    pass
                except FabricManagerError as exc:
                    raise _translate(exc, rec.holder) from exc

    def release(self, holder: str) -> dict[str, Any]:
        """Deactivate what ``holder`` holds; idempotent (unknown holder: nothing to do)."""
        with self._lock:
            rec = self.store.book.get(holder)
            if rec is None:
                return {"holder": holder, "released": False, "partition_ids": [], "pending": False}
            released = self._release_locked(rec)
        self._changed()
        return {
            "holder": holder,
            "released": released,
            "partition_ids": list(rec.partition_ids),
            "pending": not released,
        }

    def _release_locked(self, rec: Activation) -> bool:
        if rec.lost is not None:
            # The fabric reset took these partitions; their ids may be active for a new
            # holder by now, so nothing is deactivated: the record just goes.
            self.store.remove(rec.holder)
            log.info(
                "dropped lost record of %s (partitions %s gone since %s)",
                rec.holder,
                list(rec.partition_ids),
                rec.lost_at,
            )
            return True
        self.store.mark_releasing(rec.holder)
        try:
            for pid in rec.partition_ids:
                self._deactivate_quiet(pid)
        except (Unavailable, FabricManagerError) as exc:
            log.warning("release of %s pending: %s", rec.holder, exc)
            return False
        self.store.remove(rec.holder)
        log.info("released partitions %s of %s", list(rec.partition_ids), rec.holder)
        return True

    def sync(self, live: Iterable[Mapping[str, Any]], grace_s: float) -> dict[str, Any]:
        """Release every record whose holder is not live and older than ``grace_s``."""
        live_pods = {}
        for item in live:
            h = item.get("holder")
            if not isinstance(h, str) or not h:
                raise InvalidRequest("live[].holder: a non-empty string is required")
            live_pods[h] = item.get("pod")
        if grace_s < 0:
            raise InvalidRequest(f"grace_seconds: must be >= 0, got {grace_s}")
        now = utcnow()
        released: list[str] = []
        kept: list[str] = []
        pending: list[str] = []
        with self._lock:
            for rec in self.store.book.snapshot():
                if rec.holder in live_pods:
                    self.store.set_pod(rec.holder, live_pods[rec.holder])
                    kept.append(rec.holder)
                elif rec.holder.startswith(ADMIN_HOLDER_PREFIX):
                    kept.append(rec.holder)  # admin activations are released by the admin
                elif (now - rec.since).total_seconds() >= grace_s:
                    (released if self._release_locked(rec) else pending).append(rec.holder)
                else:
                    kept.append(rec.holder)
        if released or pending:
            self._changed()
        return {"released": released, "pending": pending, "kept": kept}

    # --- restarts -------------------------------------------------------------------------
    def replay(self) -> list[int]:
        """Tell Fabric Manager the active list (after it or its VM restarted)."""
        with self._lock:
            ids = self._call(self._replay_locked, replay_on_not_ready=False)
        self._changed()
        return ids

    def _replay_locked(self) -> list[int]:
        t0 = time.monotonic()
        ids = self.store.book.desired_active()
        try:
            self.fm.set_activated_list(ids)
        except NotSupported:
            # Fabric Manager is not waiting for a list (it did not restart, or runs without
            # restart mode): the list is only taken after a restart; reconcile activates
            # whatever is missing instead.
            log.info("Fabric Manager takes no activated list now (not restarted); nothing to replay")
            return []
        for rec in self.store.book.snapshot():
            if rec.releasing:  # not replayed: a restarted Fabric Manager has forgotten it
                self.store.remove(rec.holder)
        self.status.replays += 1
        self.status.last_replay_at = datetime.now(UTC)
        self.status.last_replay_s = time.monotonic() - t0
        log.info("replayed activated partition list %s to Fabric Manager", ids)
        return ids

    def fabric_reset(self, reason: str) -> list[Activation]:
        """The NVSwitch fabric was reset (service VM restart): mark every record lost and
        tell Fabric Manager, once reachable, that nothing is active. Returns the lost records.

        Fabric Manager's resiliency (replaying the activated list) only covers its own
        process restarting inside a running service VM, whose NVSwitch state survives
        (FM User Guide, "Resiliency"/"Fabric Manager Restart Mode"). A VM restart with
        managed hostdevs resets the NVSwitches through vfio, so the routing of running
        tenant VMs is gone; claiming them active again would lie.
        """
        with self._lock:
            lost = self.store.mark_lost(reason)
            self.status.fabric_resets += 1
            self.status.last_fabric_reset_at = datetime.now(UTC)
        if lost:
            log.error(
                "fabric reset (%s): partitions of %d holder(s) lost: %s",
                reason,
                len(lost),
                ", ".join(describe_holder(a) for a in lost),
            )
        self._changed()
        return lost

    def lost(self) -> list[dict[str, Any]]:
        with self._lock:
            return [activation_view(a) for a in self.store.book.lost()]

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

    def fabric_restarted(self, timeout_s: float = 60.0) -> list[int]:
        """Fabric Manager (or the service VM it runs in) restarted: reconnect, then replay."""
        self.reconnect(timeout_s)
        return self.replay()

    def reconcile(self) -> dict[str, Any]:
        """Bring Fabric Manager in line with the records; called periodically. Never raises Unavailable."""
        report: dict[str, Any] = {"reachable": False, "activated": [], "released": [], "unrecorded": []}
        with self._lock:
            try:
                parts = self._partitions()
                for rec in self.store.book.snapshot():
                    if rec.releasing and self._release_locked(rec):
                        report["released"].append(rec.holder)
                parts = self._partitions()
                active = {p.id for p in parts if p.active}
                missing = [pid for pid in self.store.book.desired_active() if pid not in active]
                if missing:
                    try:
                        for pid in missing:
                            self.fm.activate(pid)
                            report["activated"].append(pid)
                    except NotReady:
                        self._call(self._replay_locked, replay_on_not_ready=False)
                        report["activated"] = missing
                    except FabricManagerError as exc:
                        log.error("cannot re-activate recorded partitions %s: %s", missing, exc)
                report["unrecorded"] = sorted(active - set(self.store.book.held()))
                if report["unrecorded"]:
                    log.warning("partitions %s active in Fabric Manager without a record", report["unrecorded"])
                report["reachable"] = True
                if self.layout is not None and self.status.layout_problems is None:
                    self.validate_layout()  # not done at start (Fabric Manager was not reachable)
            except Unavailable as exc:
                log.warning("reconcile: %s", exc)
        if report["activated"] or report["released"]:
            self._changed()
        return report

    # --- admin (caasctl) ------------------------------------------------------------------
    def _partition(self, parts: list[PartitionInfo], pid: int) -> PartitionInfo:
        for p in parts:
            if p.id == pid:
                return p
        raise NotFound(f"partition {pid}: no such partition (ids {[p.id for p in parts]})")

    def _evict(self, parts: list[PartitionInfo], target: PartitionInfo) -> list[str]:
        """Force: deactivate every partition and record overlapping ``target``."""
        evicted = []
        for p in parts:
            if p.id == target.id or not (p.physical_ids & target.physical_ids):
                continue
            rec = self.store.book.holder_of(p.id)
            if rec is not None:
                if not self._release_locked(rec):
                    raise Unavailable(f"cannot release {rec.holder} to make room for partition {target.id}")
                evicted.append(rec.holder)
            elif p.active:
                self._deactivate_quiet(p.id)
                evicted.append(f"unrecorded partition {p.id}")
        return evicted

    def admin_activate(self, pid: int, force: bool = False) -> dict[str, Any]:
        with self._lock:
            parts = self._partitions()
            target = self._partition(parts, pid)
            holder = f"{ADMIN_HOLDER_PREFIX}{pid}"
            rec = self.store.book.holder_of(pid)
            if target.active and rec is not None:
                return {"id": pid, "active": True, "holder": rec.holder, "evicted": []}
            if not target.supported:
                raise Unsupported(f"partition {pid} is unsupported by Fabric Manager (NVLink failure)")
            evicted: list[str] = []
            blockers = self._blockers(parts, [target], holder)
            if blockers:
                if not force:
                    raise Conflict(f"partition {pid} overlaps: " + "; ".join(blockers) + " (use force)")
                evicted = self._evict(parts, target)
                parts = self._partitions()
                target = self._partition(parts, pid)
            rec = Activation(
                holder=holder,
                gpus=tuple(sorted(target.pci_bus_ids)),
                partition_ids=(pid,),
                physical_ids=tuple(sorted(target.physical_ids)),
                since=utcnow(),
                nvlink=target.nvlinks > 0,
            )
            self.store.put(rec)
            if not target.active:
                self._reset_gpus(rec)
                self._activate_all(rec, [target])
            log.warning("admin activated partition %s (force=%s, evicted %s)", pid, force, evicted)
        self._changed()
        return {"id": pid, "active": True, "holder": holder, "evicted": evicted}

    def admin_deactivate(self, pid: int, force: bool = False) -> dict[str, Any]:
        with self._lock:
            parts = self._partitions()
            target = self._partition(parts, pid)
            rec = self.store.book.holder_of(pid)
            if rec is not None and not rec.holder.startswith(ADMIN_HOLDER_PREFIX) and not force:
                raise Conflict(f"partition {pid} is held by {describe_holder(rec)} (use force)", holder=rec.holder)
            if rec is not None:
                if not self._release_locked(rec):
                    raise Unavailable(f"Fabric Manager unreachable; release of {rec.holder} pending")
            elif target.active:
                self._deactivate_quiet(pid)
            log.warning("admin deactivated partition %s (force=%s, holder %s)", pid, force, rec.holder if rec else None)
        self._changed()
        return {"id": pid, "active": False, "released_holder": rec.holder if rec else None}


def check_holder(holder: object) -> None:
    if not isinstance(holder, str) or not holder.strip():
        raise InvalidRequest("holder: a non-empty string is required")
    if len(holder) > MAX_HOLDER_LEN or any(c in holder for c in "\n\r\x00"):
        raise InvalidRequest(f"holder: at most {MAX_HOLDER_LEN} characters, no control characters")


def describe_holder(rec: Activation) -> str:
    return f"{rec.holder} (pod {rec.pod})" if rec.pod else rec.holder


def activation_view(a: Activation) -> dict[str, Any]:
    return {
        "holder": a.holder,
        "gpus": list(a.gpus),
        "partition_ids": list(a.partition_ids),
        "pod": a.pod,
        "since": a.since.isoformat(),
        "releasing": a.releasing,
        "lost": a.lost,
        "lost_at": a.lost_at.isoformat() if a.lost_at else None,
    }


def result_view(a: Activation) -> dict[str, Any]:
    return {"holder": a.holder, "gpus": list(a.gpus), "partition_ids": list(a.partition_ids), "nvlink": a.nvlink}


def _translate(exc: Exception, holder: str) -> Exception:
    if isinstance(exc, Unavailable):
        return exc
    if isinstance(exc, PartitionUnsupported):
        return Unsupported(str(exc))
    if isinstance(exc, PartitionConflict):
        return Conflict(f"Fabric Manager refused for {holder}: {exc}")
    if isinstance(exc, UnknownPartition):
        return NotFound(str(exc))
    return Unavailable(f"Fabric Manager error: {exc}")


__all__ = ["ADMIN_HOLDER_PREFIX", "FabricStatus", "PartitionService"]
