"""The sandbox's supervisor starts a crashed service again, with back-off, and says so."""

from __future__ import annotations

from pathlib import Path

from devtools.sandbox import supervisor as sup
from devtools.sandbox.supervisor import ServiceSpec, Supervisor
from devtools.waiting import wait_for


def _crashing(tmp_path: Path) -> Supervisor:
    s = Supervisor(tmp_path / "logs")
    # `gpucaas` with an unknown command exits at once with a usage error: a crashing service.
    s.start(ServiceSpec(name="crasher", args=["no-such-service"]))
    return s


def test_a_crashed_service_is_restarted_with_growing_back_off(tmp_path: Path) -> None:
    s = _crashing(tmp_path)
    svc = s.services["crasher"]
    try:
        wait_for(lambda: svc.process.poll() is not None, timeout=60, what="the service to crash")
        t = svc.started_at + 1  # crashed within a second of starting: not a stable run
        first = s.revive(now=t)
        assert [(e.name, e.restarted) for e in first] == [("crasher", True)]
        assert "restarted" in first[0].describe() and "code 2" in first[0].describe()
        assert svc.restarts == 1

        delays = []
        for _ in range(4):
            wait_for(lambda: svc.process.poll() is not None, timeout=60, what="the service to crash again")
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
        assert svc.restarts == 5
    finally:
        s.stop_all()


def test_back_off_resets_after_a_stable_run(tmp_path: Path) -> None:
    s = _crashing(tmp_path)
    svc = s.services["crasher"]
    try:
        wait_for(lambda: svc.process.poll() is not None, timeout=60, what="the service to crash")
        svc.crashes = 5  # many crashes before ...
        later = svc.started_at + sup.STABLE_SECONDS + 1  # ... but this run lasted a minute
        events = s.revive(now=later)
        assert [(e.restarted, e.crashes) for e in events] == [(True, 1)]
    finally:
        s.stop_all()
