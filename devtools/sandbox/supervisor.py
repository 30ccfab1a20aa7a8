"""Runs the sandbox's services as child processes and keeps an eye on them.

Every part of the sandbox is the real service started through its own
``gpucaas <service>`` command, so the parts talk over their real protocols
(HTTP to the local cluster's kube-apiserver, HTTPS to the API, gRPC on unix sockets
between the kubelet and the device plugin, HTTP on a unix socket to the
fabric service). The supervisor starts each one, waits until it answers, can
restart one (the end-to-end tests use that to prove convergence), starts a
crashed one again with back-off (``revive``), and stops them all in reverse
order on shutdown; each dies with the process that started it, however that ends
(:mod:`devtools.children`).
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.backoff import Backoff
from devtools import children

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], bool]


class ServiceFailed(RuntimeError):
    """A sandbox service exited or never became ready."""


def http_ready(url: str, ca_file: Path | None = None) -> ReadyCheck:
    """Ready when GET url answers with a status below 500."""

    def check() -> bool:
        ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:  # a loopback URL
                return resp.status < 500
        except urllib.error.HTTPError as exc:
            return exc.code < 500
        except OSError:
            return False

    return check


def file_ready(path: Path) -> ReadyCheck:
    return path.exists


@dataclass
class ServiceSpec:
    name: str
    args: list[str]  # arguments after `gpucaas`
    env: dict[str, str] = field(default_factory=dict)
    ready: ReadyCheck | None = None
    # Seconds the service may go without becoming ready AND without being busy starting (see
    # ``Supervisor.wait_ready``): a start that is merely slow (a loaded machine) is waited for.
    ready_timeout: float = 90.0


PROGRESS_WINDOW_S = 5.0
STARTING_CPU_SHARE = 0.05  # of one core: a start in progress uses more, an idle daemon less


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class RunningService:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    crashes: int = 0  # consecutive crashes, reset once it has run for STABLE_SECONDS
    next_try: float | None = None  # when a crashed service is started again


# Back-off of crash restarts: 1 s, 2 s, 4 s, ... at most 60 s; a service that ran for
# a minute before it crashed starts again at once (like a kubelet's CrashLoopBackOff,
# which doubles from 10 s to 5 min and resets after 10 min of running).
BACKOFF = Backoff(initial_s=1.0, max_s=60.0)
STABLE_SECONDS = 60.0


@dataclass(frozen=True)
class Revival:
    """What ``revive`` did or will do for one crashed service (for the console)."""

    name: str
    exit_code: int | None
    restarted: bool
    delay: float  # seconds until the next try (0 when restarted now)
    crashes: int

    def describe(self) -> str:
        if self.restarted:
            return f"{self.name} exited (code {self.exit_code}); restarted it (crash {self.crashes})"
        return f"{self.name} exited (code {self.exit_code}); restarting it in {self.delay:.0f}s (crash {self.crashes})"


class Supervisor:
    """Start, watch, restart and stop the sandbox's service processes."""

    def __init__(self, log_dir: Path, base_env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.services: dict[str, RunningService] = {}

    def _spawn(self, spec: ServiceSpec) -> tuple[subprocess.Popen[bytes], Path]:
        log_path = self.log_dir / f"{spec.name}.log"
        env = {**self.base_env, **spec.env, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "gpucaas", *spec.args]
        out = open(log_path, "ab")  # handed to the child
        try:
            proc = children.popen(  # our own command line
                cmd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            out.close()
        log.info("started %s (pid %d), log %s", spec.name, proc.pid, log_path)
        return proc, log_path

    def start(self, spec: ServiceSpec) -> RunningService:
        proc, log_path = self._spawn(spec)
        svc = RunningService(spec, proc, log_path)
        self.services[spec.name] = svc
        self.wait_ready(svc)
        return svc

    def wait_ready(self, svc: RunningService) -> None:
        """Until the service answers its ready check. It fails when the service exits, or when for
        ``ready_timeout`` seconds it has neither become ready nor been busy starting: a deadline
        that counts progress. Busy = it used at least ``STARTING_CPU_SHARE`` of a core over the
        last ``PROGRESS_WINDOW_S`` (imports, connecting: a start on a loaded machine gets less CPU
        per second but keeps using all it gets), which an idle daemon retrying something it will
        never get (a few % of a core) does not."""
        if svc.spec.ready is None:
            return
        started = time.monotonic()
        progress_at, report_at = started, started + svc.spec.ready_timeout
        window_at, window_cpu = started, cpu_seconds(svc.process.pid)
        while True:
            if svc.process.poll() is not None:
                raise ServiceFailed(
                    f"{svc.spec.name} exited with code {svc.process.returncode}; last log lines:\n{tail(svc.log_path)}"
                )
            if svc.spec.ready():
                return
            now = time.monotonic()
            if now - window_at >= PROGRESS_WINDOW_S:
                used = cpu_seconds(svc.process.pid)
                if (
                    used is not None
                    and window_cpu is not None
                    and used - window_cpu >= STARTING_CPU_SHARE * (now - window_at)
                ):
                    progress_at = now
                window_at, window_cpu = now, used
            if now - progress_at >= svc.spec.ready_timeout:
                raise ServiceFailed(
                    f"{svc.spec.name} not ready after {now - started:.0f}s, and not busy starting for the "
                    f"last {svc.spec.ready_timeout:.0f}s; last log lines:\n{tail(svc.log_path)}"
                )
            if now >= report_at:
                log.warning("%s still starting after %.0fs (busy: waiting on)", svc.spec.name, now - started)
                report_at = now + svc.spec.ready_timeout
            time.sleep(0.2)

    def restart(self, name: str, kill: bool = False) -> RunningService:
        """Stop one service (SIGTERM, or SIGKILL with ``kill``) and start it again."""
        svc = self.services[name]
        self._stop_process(svc, kill=kill)
        proc, log_path = self._spawn(svc.spec)
        svc.process, svc.log_path = proc, log_path
        svc.restarts += 1
        svc.started_at, svc.next_try = time.monotonic(), None
        self.wait_ready(svc)
        return svc

    def check_alive(self) -> list[str]:
        """Names of services that have exited."""
        return [n for n, s in self.services.items() if s.process.poll() is not None]

    def revive(self, now: float | None = None) -> list[Revival]:
        """Start crashed services again with exponential back-off instead of giving up.

        Called periodically; returns one ``Revival`` per crash noticed and per restart
        made, so the caller can say what happened. A restart does not wait for the
        service to be ready (a service that crashes at once is simply noticed again).
        """
        now = time.monotonic() if now is None else now
        events: list[Revival] = []
        for name, svc in self.services.items():
            code = svc.process.poll()
            if code is None:
                if now - svc.started_at >= STABLE_SECONDS:
                    svc.crashes = 0
                continue
            if svc.next_try is None:  # a crash not seen before: schedule the restart
                svc.crashes = 0 if now - svc.started_at >= STABLE_SECONDS else svc.crashes
                delay = BACKOFF.delay(svc.crashes)
                svc.crashes += 1
                svc.next_try = now + delay
                if delay > 0:
                    events.append(Revival(name, code, False, delay, svc.crashes))
            if now >= svc.next_try:
                proc, log_path = self._spawn(svc.spec)
                svc.process, svc.log_path = proc, log_path
                svc.restarts += 1
                svc.started_at = now
                svc.next_try = None
                log.warning("%s exited with code %s; restarted (pid %d)", name, code, proc.pid)
                events.append(Revival(name, code, True, 0.0, svc.crashes))
        return events

    def _stop_process(self, svc: RunningService, kill: bool = False, timeout: float = 15.0) -> None:
        proc = svc.process
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing it", svc.spec.name, timeout)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def stop_all(self) -> None:
        for name in reversed(list(self.services)):
            self._stop_process(self.services[name])
            log.info("stopped %s", name)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
