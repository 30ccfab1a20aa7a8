"""Child processes that die with the process that started them, however it ends.

A test run or a sandbox ended by SIGTERM or SIGKILL runs no ``finally`` and no ``atexit``:
its etcd, kube-apiserver, kubelets and services would live on, holding ports and folders.
Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (prctl(2)), set in the child between fork and
exec, has the kernel kill the child when its parent goes, whatever killed the parent. The
setting survives ``exec`` (not of a set-user-ID binary or one with file capabilities), so
it holds for a command run through ``nsenter``/``unshare`` without ``--fork``, which exec it
in place; it is not inherited by the child's own children (a daemon's workers are its own to
stop).

The parent the kernel watches is the *thread* that forked, not the process: a child started
from a thread that later ends would be killed when that thread ends. So :func:`popen` starts
children on the main thread when called there (it lasts as long as the process) and hands
the start to one launcher thread, made once and never ended, when called from any other.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # libc's, resolved here: not in the forked child
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def _dies_with(parent: int) -> Callable[[], None]:
    """The ``preexec_fn``: the death signal, then a check that the parent did not already go
    between the fork and the prctl (the child would then have no parent left to outlive)."""
    assert _PRCTL is not None

    def in_child() -> None:
        if _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


class _Launcher:
    """One daemon thread that runs the starts handed to it, in order, for the life of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] | None = None

    def run(self, start: Callable[[], Any]) -> Any:
        with self._lock:
            if self._jobs is None:
                self._jobs = queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(self._jobs,), name="child-launcher", daemon=True).start()
            jobs = self._jobs
        done: Future[Any] = Future()
        jobs.put((start, done))
        return done.result()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
        while True:
            start, done = jobs.get()
            try:
                done.set_result(start())
            except BaseException as exc:  # noqa: BLE001 -- the caller's to see, in its own thread
                done.set_exception(exc)

    def forget(self) -> None:
        """In a forked child: the thread stayed behind in the parent, and the lock may be held."""
        self._lock = threading.Lock()
        self._jobs = None


_LAUNCHER = _Launcher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_LAUNCHER.forget)


def popen(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, **kwargs)`` whose child is SIGKILLed when this process ends
    (on Linux; elsewhere a plain ``Popen``)."""
    if _PRCTL is None:
        return subprocess.Popen(args, **kwargs)
    if "preexec_fn" in kwargs:
        raise TypeError("popen sets preexec_fn itself")
    parent = os.getpid()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(args, preexec_fn=_dies_with(parent), **kwargs)

    if threading.current_thread() is threading.main_thread():
        return start()
    proc: subprocess.Popen[bytes] = _LAUNCHER.run(start)
    return proc
