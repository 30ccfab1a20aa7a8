"""Activating the partitions a holder's GPUs need.

``activate(holder, gpus)``: the partitions the GPU set needs
(``core.topology.partitions_for_gpus``: the set's own partition, or one single-GPU
partition per GPU) are activated for ``holder``; idempotent for the same holder and set;
refused with :class:`~services.fabric.errors.Conflict` naming the other holder when a needed
partition overlaps one that is active or held.

GPU reset: before a holder's partitions are activated its GPUs are reset through sysfs
(``gpu_reset`` hook, ``core.gpu_reset``); after release the GPU-lease agent resets
them right before the firmware check.

Consistency: the record is written before Fabric Manager is asked (write-ahead); a
multi-partition activation that fails half-way is rolled back (``release.py``) before the
error is returned, so nothing is left half-activated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial

from core import fabric_messages as fm, topology
from services.fabric.bookkeeping import Activation, utcnow
from services.fabric.discovery import normalize_bdf
from services.fabric.errors import Conflict, InvalidRequest, Unavailable, Unsupported
from services.fabric.fabric_manager.interface import FabricManagerError, PartitionAlreadyActive, PartitionInfo
from services.fabric.release import ReleaseMixin
from services.fabric.views import check_holder, describe_holder, result_view, translate

log = logging.getLogger(__name__)


class ActivationMixin(ReleaseMixin):
    """Activation for a holder: GPU addresses to partitions, overlap checks, reset, activate."""

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

    def activate(self, holder: str, gpus: Iterable[str], pod: str | None = None) -> fm.ActivationResult:
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
            raise translate(exc, rec.holder) from exc

    def _activate_missing(self, rec: Activation, parts: list[PartitionInfo]) -> None:
        active = {p.id for p in parts if p.active}
        for pid in rec.partition_ids:
            if pid not in active:
                try:
                    self._call(partial(self.fm.activate, pid))
                except PartitionAlreadyActive:
                    pass
                except FabricManagerError as exc:
                    raise translate(exc, rec.holder) from exc
