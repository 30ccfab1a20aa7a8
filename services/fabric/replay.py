"""Fabric Manager and the records brought back in line after restarts.

- ``replay()``: after Fabric Manager (or its service VM) restarted, tell it the active list
  again (``set_activated_list``); ``_call`` (``connection.py``) does this on its own when a
  call meets a Fabric Manager waiting for the list.
- ``reconcile()``: the periodic check that replays after a restart,
  finishes pending releases and re-activates recorded partitions that are missing.
- ``fabric_reset(reason)``: the service VM restarted, which resets the NVSwitches (managed
  hostdevs go through a vfio reset): every partition active before is gone and cannot be
  replayed. The records are marked *lost* (the holders are reported; see ``main`` for the
  Event, conditions and the pod policy), and Fabric Manager is told that nothing is active.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from services.fabric.bookkeeping import Activation
from services.fabric.errors import Unavailable
from services.fabric.fabric_manager.interface import FabricManagerError, NotReady, NotSupported
from services.fabric.queries import QueriesMixin
from services.fabric.release import ReleaseMixin
from services.fabric.views import describe_holder

log = logging.getLogger(__name__)


class ReplayMixin(ReleaseMixin, QueriesMixin):
    """Replay, reconcile and the fabric reset."""

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
