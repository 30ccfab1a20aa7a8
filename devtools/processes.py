"""The development tools' one supervisor: child processes started, watched, restarted and
stopped by name — a local cluster's components, a real node's daemons, the registries, the
ingress controller and the sandbox's gpucaas services.

Each child runs in a session of its own with its output appended to ``<logs>/<name>.log``
(a line marks each start), and dies with the process that started it, however that ends
(:mod:`devtools.children`). Bringing one up waits until its readiness check holds
(:func:`http_ready`, :func:`unix_socket_ready`, :func:`file_ready`, or any predicate). That
wait fails when the child exits, or when for ``ready_timeout`` seconds it has neither become
ready nor been busy starting: a deadline that counts progress, so that a start that is merely
slow on a loaded machine is waited for. A child can be killed and started again (the
end-to-end tests and the chaos soak prove convergence that way), a crashed one is started again
with back-off (:meth:`Supervisor.revive`), and :meth:`Supervisor.stop` stops them all, newest
first.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.backoff import Backoff
from devtools import children

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], bool]

#: a start counts as busy while the child uses at least this share of one core over each
#: window: a start in progress (imports, connecting) uses more, an idle daemon retrying
#: something it will never get a few % of a core
PROGRESS_WINDOW_S = 5.0
STARTING_CPU_SHARE = 0.05
#: back-off of crash restarts: 1 s, 2 s, 4 s, ... at most 60 s; a child that ran for a minute
#: before it crashed starts again at once (like a kubelet's CrashLoopBackOff, which doubles
#: from 10 s to 5 min and resets after 10 min of running)
BACKOFF = Backoff(initial_s=1.0, max_s=60.0)
STABLE_SECONDS = 60.0
#: every HTTP status but a server error: the server is up, whatever it makes of the request
ANSWERING = range(100, 500)


class ProcessFailed(RuntimeError):
    """A child exited or did not become ready; the message quotes its log's tail."""


@dataclass
class Child:
    """One named child: how to run it and, once launched, its process."""

    name: str
    args: list[str]
    log_path: Path
    ready: ReadyCheck | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: seconds it may go without becoming ready AND without being busy starting
    ready_timeout: float = 90.0
    #: signals go to its whole process group (it leads its own): what it started goes with it
    whole_group: bool = False
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    crashes: int = 0  # consecutive crashes, reset once it has run for STABLE_SECONDS
    next_try: float | None = None  # when a crashed child is started again


@dataclass(frozen=True)
class Revival:
    """What :meth:`Supervisor.revive` did or will do for one crashed child (for the console)."""

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
    """Named child processes with logs under ``logs_dir``, in the order they were added."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self.children: dict[str, Child] = {}

    def add(
        self,
        name: str,
        args: Sequence[object],
        ready: ReadyCheck | None = None,
        env: dict[str, str] | None = None,
        *,
        ready_timeout: float = 90.0,
        whole_group: bool = False,
    ) -> Child:
        """Register a child (or replace the one of that name); :meth:`bring_up` starts it."""
        child = Child(
            name,
            [str(a) for a in args],
            self.logs_dir / f"{name}.log",
            ready,
            dict(env or {}),
            ready_timeout=ready_timeout,
            whole_group=whole_group,
        )
        self.children[name] = child
        return child

    # --- starting -----------------------------------------------------------------------

    def launch(self, name: str) -> None:
        """Start the child's process, without waiting for it to be ready."""
        child = self.children[name]
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        with child.log_path.open("ab") as out:
            out.write(f"--- started {time.strftime('%H:%M:%S')}: {' '.join(child.args)}\n".encode())
            out.flush()
            child.process = children.popen(
                child.args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2"), **child.env},
            )
        child.started_at, child.next_try = time.monotonic(), None
        log.info("started %s (pid %d), log %s", name, child.process.pid, child.log_path)

    def wait_ready(self, name: str, timeout: float | None = None) -> None:
        """Until the child's ready check holds. Fails when it exits, or when for ``timeout``
        seconds (its ``ready_timeout`` by default) it has neither become ready nor been busy
        starting: busy = at least ``STARTING_CPU_SHARE`` of a core over the last
        ``PROGRESS_WINDOW_S`` (a start on a loaded machine gets less CPU per second but keeps
        using all it gets), which an idle daemon retrying something it will never get is not."""
        child = self.children[name]
        if child.ready is None:
            return
        patience = child.ready_timeout if timeout is None else timeout
        started = time.monotonic()
        progress_at, report_at = started, started + patience
        proc = child.process
        window_at, window_cpu = started, cpu_seconds(proc.pid) if proc is not None else None
        while True:
            proc = child.process
            if proc is None or proc.poll() is not None:
                code = proc.returncode if proc is not None else None
                raise ProcessFailed(f"{name} exited with code {code}; last log lines:\n{self.log_tail(name)}")
            if child.ready():
                log.info("%s is ready (pid %s)", name, proc.pid)
                return
            now = time.monotonic()
            if now - window_at >= PROGRESS_WINDOW_S:
                used = cpu_seconds(proc.pid)
                busy = STARTING_CPU_SHARE * (now - window_at)
                if used is not None and window_cpu is not None and used - window_cpu >= busy:
                    progress_at = now
                window_at, window_cpu = now, used
            if now - progress_at >= patience:
                raise ProcessFailed(
                    f"{name} not ready after {now - started:.0f}s, and not busy starting for the last "
                    f"{patience:.0f}s; last log lines:\n{self.log_tail(name)}"
                )
            if now >= report_at:
                log.warning("%s still starting after %.0fs (busy: waiting on)", name, now - started)
                report_at = now + patience
            time.sleep(0.1)

    def bring_up(self, name: str, timeout: float | None = None) -> Child:
        """Launch the child and wait until it is ready."""
        self.launch(name)
        self.wait_ready(name, timeout)
        return self.children[name]

    def start_all(self, timeout: float | None = None) -> None:
        """Bring up every child in order, each once the previous one is ready; on failure stop them all."""
        try:
            for name in self.children:
                self.bring_up(name, timeout)
        except BaseException:
            self.stop()
            raise

    # --- stopping and restarting ----------------------------------------------------------

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 20.0) -> None:
        """Stop one child (SIGKILL by default: a crash); a signal it outlives by ``timeout`` is
        followed by SIGKILL. A child stopped so is not revived."""
        child = self.children[name]
        proc, child.process = child.process, None
        if proc is None or proc.poll() is not None:
            return
        if not _signal(proc, sig, whole_group=child.whole_group):
            return
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing it", name, timeout)
            _signal(proc, signal.SIGKILL, whole_group=child.whole_group)
            proc.wait(timeout=timeout)

    def restart(self, name: str, *, sig: int = signal.SIGKILL, timeout: float | None = None) -> Child:
        """Stop one child with ``sig`` (a crash by default) and bring it up again."""
        self.kill(name, sig)
        child = self.bring_up(name, timeout)
        child.restarts += 1
        return child

    def stop(self) -> None:
        """Stop every child, newest first (SIGTERM, then SIGKILL for one that lingers)."""
        for name in reversed(list(self.children)):
            self.kill(name, signal.SIGTERM)

    def revive(self, now: float | None = None) -> list[Revival]:
        """Start crashed children again with exponential back-off instead of giving up.

        Called periodically; returns one :class:`Revival` per crash noticed and per restart
        made, so that the caller can say what happened. A restart does not wait for the child
        to be ready (one that crashes at once is simply noticed again). A child stopped on
        purpose (:meth:`kill`, :meth:`stop`) is left alone.
        """
        now = time.monotonic() if now is None else now
        events: list[Revival] = []
        for name, child in self.children.items():
            if child.process is None:
                continue
            code = child.process.poll()
            if code is None:
                if now - child.started_at >= STABLE_SECONDS:
                    child.crashes = 0
                continue
            if child.next_try is None:  # a crash not seen before: schedule the restart
                child.crashes = 0 if now - child.started_at >= STABLE_SECONDS else child.crashes
                delay = BACKOFF.delay(child.crashes)
                child.crashes += 1
                child.next_try = now + delay
                if delay > 0:
                    events.append(Revival(name, code, False, delay, child.crashes))
            if now >= child.next_try:
                self.launch(name)
                child.restarts += 1
                child.started_at = now
                log.warning("%s exited with code %s; restarted it", name, code)
                events.append(Revival(name, code, True, 0.0, child.crashes))
        return events

    # --- reading --------------------------------------------------------------------------

    def pid(self, name: str) -> int | None:
        proc = self.children[name].process
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.children[name].log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _signal(proc: subprocess.Popen[bytes], sig: int, *, whole_group: bool) -> bool:
    """Send ``sig`` to the child (or its process group); False when it is gone already."""
    try:
        if whole_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        return False
    return True


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (``/proc/<pid>/stat``); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- readiness checks ---------------------------------------------------------------------


def http_ready(
    url: str, *, ca_file: Path | None = None, self_signed: bool = False, statuses: Container[int] = (200,)
) -> ReadyCheck:
    """Ready when GET ``url`` answers with one of ``statuses``. An HTTPS URL is verified
    against ``ca_file`` (else the system's CAs), or not at all with ``self_signed`` (a
    component's own throw-away serving certificate)."""

    def check() -> bool:
        if self_signed:
            ctx: ssl.SSLContext | None = ssl._create_unverified_context()
        else:
            ctx = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:  # a URL on this machine
                return resp.status in statuses
        except urllib.error.HTTPError as exc:
            return exc.code in statuses
        except OSError:
            return False

    return check


def unix_socket_ready(path: Path) -> ReadyCheck:
    """Ready when something accepts connections on the unix socket."""

    def check() -> bool:
        if not path.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            try:
                s.connect(str(path))
            except OSError:
                return False
        return True

    return check


def file_ready(path: Path) -> ReadyCheck:
    """Ready once ``path`` exists."""
    return path.exists
