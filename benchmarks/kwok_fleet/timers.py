"""Actions due at given wall-clock times, run one after another in one thread, in due order:
the trace's arrivals and departures and the nodes' FabricState writes. An action that has
real work hands it to the run's worker threads, so that a slow call never delays the next."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class Timers:
    """The timer heap, guarded by ``lock`` (the run's one lock: actions are added while it is held)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self._wake = threading.Condition(lock)
        self._heap: list[tuple[float, int, str, Callable[[], object]]] = []
        self._seq = 0
        self._stop = threading.Event()

    def at(self, due: float, kind: str, action: Callable[[], object]) -> None:
        """Run ``action`` once ``time.time()`` reaches ``due``; ``kind`` names it for :meth:`keep_only`."""
        with self.lock:
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, kind, action))
            self._wake.notify()

    def keep_only(self, kind: str) -> None:
        """Forget every pending action not of ``kind``."""
        with self.lock:
            self._heap = [t for t in self._heap if t[2] == kind]
            heapq.heapify(self._heap)

    def start(self) -> Timers:
        threading.Thread(target=self._loop, name="fleet-timers", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            self._wake.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                while not self._stop.is_set() and (not self._heap or self._heap[0][0] > time.time()):
                    self._wake.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.time()))
                if self._stop.is_set():
                    return
                _, _, _, action = heapq.heappop(self._heap)
            try:
                action()
            except RuntimeError:  # the worker pool is shut down: the run is over
                return
