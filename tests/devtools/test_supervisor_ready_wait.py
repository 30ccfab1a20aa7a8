"""The supervisor's start-up wait counts progress: a child busy starting is waited for past
``ready_timeout``; one that sits idle without becoming ready fails after it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devtools import processes
from devtools.processes import ProcessFailed, Supervisor, file_ready

# Burns CPU until it has used 3 CPU-seconds (however long a loaded machine makes that), then is ready.
BUSY_START = """
import sys, time
while time.process_time() < 3.0:
    pass
open(sys.argv[1], "w").write("ready")
time.sleep(60)
"""


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "PROGRESS_WINDOW_S", 0.3)


def test_a_slow_but_busy_start_is_waited_for_past_the_timeout(tmp_path: Path, short_window: None) -> None:
    ready = tmp_path / "ready"
    sup = Supervisor(tmp_path / "logs")
    sup.add("busy", [sys.executable, "-c", BUSY_START, ready], file_ready(ready), ready_timeout=1.0)
    try:
        sup.bring_up("busy")  # 3 CPU-seconds > 1 s: only progress explains it
        assert ready.exists()
    finally:
        sup.stop()


def test_an_idle_child_that_never_gets_ready_fails_and_says_why(tmp_path: Path, short_window: None) -> None:
    sup = Supervisor(tmp_path / "logs")
    sup.add("idle", [sys.executable, "-c", "import time; time.sleep(60)"], file_ready(tmp_path / "never"))
    try:
        with pytest.raises(ProcessFailed, match="idle not ready after .* not busy starting for the last 1s"):
            sup.bring_up("idle", timeout=1.0)
        assert sup.running("idle")  # it did not exit: the wait gave up on it
    finally:
        sup.stop()


def test_a_child_that_exits_while_starting_fails_with_its_log(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "logs")
    sup.add("broken", [sys.executable, "-c", "print('no config here'); raise SystemExit(3)"], lambda: False)
    with pytest.raises(ProcessFailed, match="broken exited with code 3; last log lines:\n(.|\n)*no config here"):
        sup.bring_up("broken")
