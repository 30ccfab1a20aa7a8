"""Every Fabric Manager call with a deadline, off the caller's thread.

With Fabric Manager gone or silent, a call into NVIDIA's ``libnvfm.so.1`` blocks
for about 70 s and then returns FM_ST_GENERIC_ERROR; ``fmConnect``'s timeout
bounds only the connect. A caller holding the partition lock (or an event loop)
through such a call would stall every allocation and could push a replay past
the 60 s Fabric Manager waits for the activated list in restart mode.

:class:`DeadlineFabricManager` wraps a client (``interface.FabricManager``) and
runs each call on a dedicated worker thread that owns that client's handle.
The caller waits at most ``deadline_s``; a call that overruns is reported as
``FabricManagerUnavailable``, its worker thread is abandoned (it stays blocked in
the library; a daemon thread, so it never holds the process up) and a fresh
client, hence a fresh handle, is built for the next call. The stuck call can
only finish on the abandoned handle, which is closed by its own worker once the
library returns. The caller's locks are therefore held at most ``deadline_s``
per call.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, TypeVar

from services.fabric.fabric_manager.errors import FabricManagerUnavailable
from services.fabric.fabric_manager.interface import FabricManager, FailedDevices, PartitionInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_DEADLINE_S = 5.0


class _Worker:
    """One daemon thread running submitted calls in order."""

    _ids = 0

    def __init__(self) -> None:
        _Worker._ids += 1
        self._q: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"fm-call-{_Worker._ids}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                fut.set_exception(exc)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()
        self._q.put((fut, fn))
        return fut

    def retire(self, last: Callable[[], Any] | None = None) -> None:
        """Run ``last`` (if any) after whatever is queued, then end."""
        if last is not None:
            self._q.put((Future(), last))
        self._q.put(None)


class DeadlineFabricManager:
    """``interface.FabricManager`` around a client built by ``make``, each call bounded."""

    def __init__(
        self,
        make: Callable[[], FabricManager],
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        connect_deadline_s: float | None = None,
    ) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s: must be > 0, got {deadline_s}")
        self._make = make
        self.deadline_s = deadline_s
        self.connect_deadline_s = connect_deadline_s or deadline_s
        self._swap = threading.Lock()  # guards _inner/_worker only; never held across a call
        self._inner = make()
        self._worker = _Worker()
        self.backend = getattr(self._inner, "backend", "unknown")
        #: calls that overran their deadline (each abandoned one worker and handle)
        self.overruns = 0

    def __repr__(self) -> str:
        return f"DeadlineFabricManager({self._inner!r}, deadline_s={self.deadline_s})"

    @property
    def inner(self) -> FabricManager:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        # The simulator's event switches (restart, fabric, ...) stay reachable.
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def _run(self, what: str, fn: Callable[[FabricManager], T], deadline: float) -> T:
        with self._swap:
            inner, worker = self._inner, self._worker
        fut = worker.submit(lambda: fn(inner))
        try:
            return fut.result(timeout=deadline)
        except FutureTimeout:
            self._abandon(inner, worker, what)
            raise FabricManagerUnavailable(
                f"{what}: no answer from Fabric Manager within {deadline:g} s (call abandoned; "
                "the next call uses a new connection)"
            ) from None

    def _abandon(self, inner: FabricManager, worker: _Worker, what: str) -> None:
        with self._swap:
            self.overruns += 1
            if self._inner is not inner:
                return  # another caller swapped already
            log.warning(
                "Fabric Manager call %s overran %.3g s: abandoning its thread %s and handle",
                what,
                self.deadline_s,
                worker.thread.name,
            )
            worker.retire(last=inner.close)  # closes the old handle if the library ever returns
            self._inner = self._make()
            self._worker = _Worker()

    # --- interface.FabricManager ----------------------------------------------------
    def connect(self) -> None:
        self._run("fmConnect", lambda fm: fm.connect(), self.connect_deadline_s)

    def close(self) -> None:
        with self._swap:
            inner, worker = self._inner, self._worker
        fut = worker.submit(inner.close)
        try:
            fut.result(timeout=self.deadline_s)
        except FutureTimeout:
            self._abandon(inner, worker, "fmDisconnect")
        except Exception:  # close never raises
            log.debug("close failed", exc_info=True)

    def list_partitions(self) -> list[PartitionInfo]:
        return self._run("fmGetSupportedFabricPartitions", lambda fm: fm.list_partitions(), self.deadline_s)

    def activate(self, partition_id: int) -> None:
        self._run("fmActivateFabricPartition", lambda fm: fm.activate(partition_id), self.deadline_s)

    def deactivate(self, partition_id: int) -> None:
        self._run("fmDeactivateFabricPartition", lambda fm: fm.deactivate(partition_id), self.deadline_s)

    def set_activated_list(self, partition_ids: list[int]) -> None:
        ids = list(partition_ids)
        self._run("fmSetActivatedFabricPartitions", lambda fm: fm.set_activated_list(ids), self.deadline_s)

    def nvlink_failed_devices(self) -> FailedDevices:
        return self._run("fmGetNvlinkFailedDevices", lambda fm: fm.nvlink_failed_devices(), self.deadline_s)

    def unsupported_partitions(self) -> list[int]:
        return self._run("fmGetUnsupportedFabricPartitions", lambda fm: fm.unsupported_partitions(), self.deadline_s)
