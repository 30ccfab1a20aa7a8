"""Stopping a long-running process on SIGTERM or SIGINT, whichever of its threads the signal reaches.

CPython runs a signal's Python handler in the main thread only, and only once that
thread runs Python code again. The kernel hands a process's signal to any one of its
threads (gRPC's, the HTTP clients', the services' own loops); when it is not the main
thread, a main thread blocked on a lock (``threading.Event.wait()``) is never woken and
the process misses its SIGTERM. ``gpucaas dra-driver`` did, in CI: it kept running until
it was killed, and on a node the kubelet would have had to SIGKILL it at the end of the
pod's grace period, with its sockets left behind.

The C-level handler writes the signal's number to the wakeup fd whichever thread it runs
on (as asyncio's loop relies on), so :func:`on_stop_signal` reads that fd in a thread of
its own and calls back from there.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def on_stop_signal(stop: Callable[[], object], signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
    """From now on, call ``stop()`` each time one of ``signals`` comes to this process.

    Call it from the main thread (Python sets handlers and the wakeup fd there only), before
    the process starts its work: a signal that comes during start-up is kept and calls
    ``stop()`` at once. ``stop`` runs in a daemon thread; it should only set a flag or an event.
    """
    wanted = {int(s) for s in signals}
    reader, writer = socket.socketpair()
    writer.setblocking(False)  # the C handler must never block: a full buffer drops the byte, not the signal
    for sig in wanted:
        signal.signal(sig, _noted)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def relay(reader: socket.socket, _writer: socket.socket) -> None:  # holds the writer: its fd stays open
        while True:
            for signum in reader.recv(64):
                if signum in wanted:
                    log.info("signal %s: stopping", signal.Signals(signum).name)
                    stop()

    threading.Thread(target=relay, args=(reader, writer), name="stop-signals", daemon=True).start()


def _noted(signum: int, _frame: object) -> None:
    """The Python-level handler: nothing to do, the relay thread has acted (or will) on the wakeup fd."""
