"""A child started by the supervisor (directly, as the local cluster and a real node start
theirs, or as the sandbox starts a gpucaas service) dies when the process that started it is
SIGKILLed, also when the start was made from a thread that has ended since (the kernel's
parent-death signal follows the forking thread), and through ``nsenter``/``unshare`` as a real
node's daemons run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devtools.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]

#: Run as ``python -c PARENT <folder> <starter> <where> <command...>``: starts one child,
#: waits until the thread that started it is gone from the kernel too, prints its pid, sleeps.
PARENT = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path

    folder, starter, where, command = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    pids = []

    def start():
        from devtools.processes import Supervisor

        supervisor = Supervisor(folder / "logs")
        if starter == "supervisor":
            supervisor.add("child", command)
            supervisor.bring_up("child")
        else:
            from devtools.sandbox.services import start_service

            start_service(supervisor, "child", command, env={}, ready=None)
        pids.append(supervisor.pid("child"))

    if where == "thread":
        thread = threading.Thread(target=start)
        thread.start()
        thread.join()
        while Path(f"/proc/self/task/{thread.native_id}").exists():  # join returns before the OS thread ends
            time.sleep(0.01)
    else:
        start()
    print(pids[0], flush=True)
    time.sleep(600)
    """
)

#: what the sandbox's service starter runs as ``python -m gpucaas ...``: this stand-in, found first
#: in the working folder, which only sleeps
STAND_IN = "import time\ntime.sleep(600)\n"


def _state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie, dead), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _gone(pid: int) -> bool:
    return _state(pid) in (None, "Z")


def _doomed(pid: int) -> bool:
    """Gone, or a SIGKILL sent to it not yet taken (a process busy in the kernel, starting up,
    takes it a moment later): what a parent-death signal already fired leaves."""
    try:
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except OSError:
        return True
    pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
    return _gone(pid) or bool(pending & (1 << (signal.SIGKILL - 1)))


CASES = [
    ("supervisor", "main", ["sleep", "600"]),
    ("supervisor", "thread", ["sleep", "600"]),
    ("supervisor", "main", ["unshare", "--mount", "--propagation", "slave", "sh", "-c", "exec sleep 600"]),
    ("service", "main", ["child"]),
    ("service", "thread", ["child"]),
]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize(
    ("starter", "where", "command"), CASES, ids=["supervisor", "sup-thread", "sup-unshare", "service", "service-thread"]
)
def test_a_child_dies_with_the_process_that_started_it(
    tmp_path: Path, starter: str, where: str, command: list[str]
) -> None:
    if command[0] == "unshare" and os.geteuid() != 0:
        pytest.skip("a mount namespace needs root")
    (tmp_path / "gpucaas").mkdir()
    (tmp_path / "gpucaas" / "__init__.py").write_text("")
    (tmp_path / "gpucaas" / "__main__.py").write_text(STAND_IN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), starter, where, *command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        child = None
        try:
            assert parent.stdout is not None
            line = parent.stdout.readline()
            assert line.strip().isdigit(), f"the parent started no child (exit {parent.poll()})"
            child = int(line)
            # the thread is gone from the kernel: a death signal it fired has been sent by now
            assert not _doomed(child), "the child dies with the thread that started it, or on its own"
            parent.send_signal(signal.SIGKILL)
            parent.wait(30)
            wait_for(lambda: _gone(child), timeout=30, what=f"child {child} to die with its parent")
        finally:
            parent.kill()
            if child is not None and not _gone(child):
                os.kill(child, signal.SIGKILL)
