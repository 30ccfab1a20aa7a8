"""The supervisor starts a crashed child again, with back-off, and says so; a child stopped on
purpose stays stopped."""

from __future__ import annotations

import sys
from pathlib import Path

from devtools import processes
from devtools.processes import Supervisor
from devtools.waiting import wait_for


def _crashing(tmp_path: Path) -> Supervisor:
    s = Supervisor(tmp_path / "logs")
    s.add("crasher", [sys.executable, "-c", "raise SystemExit(2)"])
    s.bring_up("crasher")
    return s


def test_a_crashed_child_is_restarted_with_growing_back_off(tmp_path: Path) -> None:
    s = _crashing(tmp_path)
    child = s.children["crasher"]
    try:
        wait_for(lambda: not s.running("crasher"), timeout=60, what="the child to crash")
        t = child.started_at + 1  # crashed within a second of starting: not a stable run
        first = s.revive(now=t)
        assert [(e.name, e.restarted) for e in first] == [("crasher", True)]
        assert "restarted" in first[0].describe() and "code 2" in first[0].describe()
        assert child.restarts == 1

        delays = []
        for _ in range(4):
            wait_for(lambda: not s.running("crasher"), timeout=60, what="the child to crash again")
            t += 0.5
            noticed = s.revive(now=t)
            assert len(noticed) == 1 and not noticed[0].restarted, noticed
            assert "restarting it in" in noticed[0].describe()
            delays.append(noticed[0].delay)
            assert s.revive(now=t + noticed[0].delay - 0.1) == []  # not before the back-off
            again = s.revive(now=t + noticed[0].delay)
            assert [e.restarted for e in again] == [True]
            t += noticed[0].delay
        assert delays == [1.0, 2.0, 4.0, 8.0]
        assert child.restarts == 5
    finally:
        s.stop()


def test_back_off_resets_after_a_stable_run(tmp_path: Path) -> None:
    s = _crashing(tmp_path)
    child = s.children["crasher"]
    try:
        wait_for(lambda: not s.running("crasher"), timeout=60, what="the child to crash")
        child.crashes = 5  # many crashes before ...
        later = child.started_at + processes.STABLE_SECONDS + 1  # ... but this run lasted a minute
        events = s.revive(now=later)
        assert [(e.restarted, e.crashes) for e in events] == [(True, 1)]
    finally:
        s.stop()


def test_a_child_stopped_on_purpose_is_not_revived(tmp_path: Path) -> None:
    s = Supervisor(tmp_path / "logs")
    s.add("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
    s.bring_up("sleeper")
    s.kill("sleeper")
    assert s.revive() == [] and not s.running("sleeper")
