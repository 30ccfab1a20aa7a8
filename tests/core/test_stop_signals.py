"""A process stops on SIGTERM even when the kernel hands the signal to a thread other than the main one.

Each case is a child Python process: the main thread blocks on a ``threading.Event`` as the
node commands do, and the parent sends the signal."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, signal, sys, threading
from core.stop_signals import on_stop_signal

done = threading.Event()
on_stop_signal(done.set)
if sys.argv[1] == "main-blocks":
    # only the other threads can take SIGTERM now: the case where the main thread never wakes
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
elif sys.argv[1] == "during-start-up":
    os.kill(os.getpid(), signal.SIGTERM)  # before the process waits: kept, not lost
print("waiting", flush=True)
done.wait()
print("stopped", flush=True)
"""


def _child(case: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, case], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "waiting\n", line + proc.stdout.read()
    return proc


def _stops(proc: subprocess.Popen[str]) -> None:
    proc.wait(timeout=60)
    assert proc.stdout is not None
    assert (proc.returncode, proc.stdout.read()) == (0, "stopped\n")


def test_sigterm_taken_by_another_thread_stops_the_process() -> None:
    proc = _child("main-blocks")
    proc.send_signal(signal.SIGTERM)
    _stops(proc)


def test_sigterm_to_the_main_thread_stops_the_process() -> None:
    proc = _child("main-takes-it")
    proc.send_signal(signal.SIGTERM)
    _stops(proc)


def test_sigterm_during_start_up_stops_the_process_once_it_waits() -> None:
    _stops(_child("during-start-up"))
