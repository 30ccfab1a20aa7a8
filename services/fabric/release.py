"""Taking partitions down: ``release(holder)``, ``sync(live, grace)`` (release what no live
pod holds any more), and the rollback of a multi-partition activation that failed half-way.

A record is removed only after its partitions are deactivated; when Fabric Manager cannot
be reached the record stays, marked ``releasing``, and ``reconcile`` (``replay.py``)
finishes the release. A *lost* record (the fabric was reset) is just dropped: its partition
ids may be active for a new holder by now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from core import fabric_messages as fm
from services.fabric.bookkeeping import Activation, utcnow
from services.fabric.connection import FabricConnection
from services.fabric.errors import InvalidRequest, Unavailable
from services.fabric.fabric_manager.interface import FabricManagerError, NotReady, PartitionNotActive, UnknownPartition
from services.fabric.views import ADMIN_HOLDER_PREFIX

log = logging.getLogger(__name__)


class ReleaseMixin(FabricConnection):
    """Deactivation of what holders held, and rollback of half-done activations."""

    def release(self, holder: str) -> fm.ReleaseResult:
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

    def sync(self, live: Iterable[fm.LiveHolder], grace_s: float) -> fm.SyncResult:
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
