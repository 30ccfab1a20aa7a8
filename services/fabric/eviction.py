"""Admin activation and deactivation of one partition by id (``caasctl``), evicting with
``force`` whatever overlaps it.

An admin activation is recorded under the holder ``admin:partition-<id>``
(``views.ADMIN_HOLDER_PREFIX``): ``sync`` keeps it, only the admin releases it.
"""

from __future__ import annotations

import logging

from core import fabric_messages as fm
from services.fabric.activation import ActivationMixin
from services.fabric.bookkeeping import Activation, utcnow
from services.fabric.errors import Conflict, NotFound, Unavailable, Unsupported
from services.fabric.fabric_manager.interface import PartitionInfo
from services.fabric.views import ADMIN_HOLDER_PREFIX, describe_holder

log = logging.getLogger(__name__)


class EvictionMixin(ActivationMixin):
    """The admin's partition activation and deactivation (caasctl)."""

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

    def admin_activate(self, pid: int, force: bool = False) -> fm.AdminActivation:
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

    def admin_deactivate(self, pid: int, force: bool = False) -> fm.AdminDeactivation:
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
