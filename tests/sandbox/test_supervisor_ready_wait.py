"""The supervisor's start-up wait counts progress: a service busy starting is waited for past
``ready_timeout``; one that sits idle without becoming ready fails after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.sandbox import supervisor as sup
from devtools.sandbox.supervisor import RunningService, ServiceFailed, ServiceSpec, Supervisor, file_ready

# Burns CPU until it has used 3 CPU-seconds (however long a loaded machine makes that), then is ready.
BUSY_START = """
import sys, time
while time.process_time() < 3.0:
    pass
open(sys.argv[1], "w").write("ready")
time.sleep(60)
"""


def _run(tmp_path: Path, code: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sup, "PROGRESS_WINDOW_S", 0.3)


def test_a_slow_but_busy_start_is_waited_for_past_the_timeout(tmp_path: Path, short_window: None) -> None:
    ready = tmp_path / "ready"
    proc = _run(tmp_path, BUSY_START, str(ready))
    svc = RunningService(
        ServiceSpec("busy", [], ready=file_ready(ready), ready_timeout=1.0), proc, tmp_path / "busy.log"
    )
    try:
        Supervisor(tmp_path / "logs").wait_ready(svc)  # 3 CPU-seconds > 1 s: only progress explains it
        assert ready.exists()
    finally:
        proc.kill()
        proc.wait()


def test_an_idle_service_that_never_gets_ready_fails_and_says_why(tmp_path: Path, short_window: None) -> None:
    proc = _run(tmp_path, "import time; time.sleep(60)")
    svc = RunningService(
        ServiceSpec("idle", [], ready=file_ready(tmp_path / "never"), ready_timeout=1.0), proc, tmp_path / "idle.log"
    )
    try:
        with pytest.raises(ServiceFailed, match="idle not ready after .* not busy starting for the last 1s"):
            Supervisor(tmp_path / "logs").wait_ready(svc)
        assert proc.poll() is None  # it did not exit: the wait gave up on it
    finally:
        proc.kill()
        proc.wait()
