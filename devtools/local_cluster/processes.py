"""Child processes started, watched, crashed and restarted by name: the cluster's components and a node's daemons.

Each process runs in its own session with its output appended to ``<logs>/<name>.log``, and
dies with the process that started it (:mod:`devtools.children`);
readiness is a predicate polled until it holds (or the process exits, or a deadline
passes, and the error quotes the log's tail).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools import children

log = logging.getLogger(__name__)


class ClusterFailed(RuntimeError):
    """A process exited or did not become ready; the message quotes its log."""


@dataclass
class Component:
    name: str
    args: list[str]
    ready: Callable[[], bool]
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


class ProcessGroup:
    """Named child processes with logs under ``logs_dir``; stopped newest first."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self.components: dict[str, Component] = {}

    def add(
        self,
        name: str,
        args: Sequence[object],
        ready: Callable[[], bool],
        env: dict[str, str] | None = None,
    ) -> None:
        self.components[name] = Component(
            name, [str(a) for a in args], ready, log_path=self.logs_dir / f"{name}.log", env=dict(env or {})
        )

    def launch(self, name: str) -> None:
        comp = self.components[name]
        assert comp.log_path is not None
        comp.log_path.parent.mkdir(parents=True, exist_ok=True)
        with comp.log_path.open("ab") as out:
            out.write(f"--- started {time.strftime('%H:%M:%S')}: {' '.join(comp.args)}\n".encode())
            out.flush()
            comp.process = children.popen(
                comp.args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "GOMAXPROCS": os.environ.get("GOMAXPROCS", "2"), **comp.env},
            )

    def wait_ready(self, name: str, timeout: float) -> None:
        comp = self.components[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if comp.process is None or comp.process.poll() is not None:
                raise ClusterFailed(f"{name} exited while starting:\n{self.log_tail(name)}")
            if comp.ready():
                log.info("%s is ready (pid %s)", name, comp.process.pid)
                return
            time.sleep(0.1)
        raise ClusterFailed(f"{name} was not ready after {timeout:.0f} s:\n{self.log_tail(name)}")

    def start_all(self, timeout: float) -> None:
        """Launch every component in order, each once the previous one is ready; on failure stop them all."""
        try:
            for name in self.components:
                self.launch(name)
                self.wait_ready(name, timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component by its pid, newest first."""
        for name in reversed(list(self.components)):
            self.kill(name, signal.SIGTERM)

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 20.0) -> None:
        """Stop one component (SIGKILL by default: a crash); SIGTERM is followed by SIGKILL if it lingers."""
        comp = self.components[name]
        proc, comp.process = comp.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)

    def restart(self, name: str, *, sig: int = signal.SIGKILL, timeout: float = 120.0) -> None:
        """Kill one component and start it again; returns once it is ready."""
        self.kill(name, sig)
        self.launch(name)
        self.wait_ready(name, timeout)

    def pid(self, name: str) -> int | None:
        proc = self.components[name].process
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def http_ok(url: str, context: ssl.SSLContext | None = None) -> Callable[[], bool]:
    """Ready when ``url`` answers 200."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # a loopback URL
                return bool(resp.status == 200)
        except (OSError, urllib.error.HTTPError):
            return False

    return check


def unix_socket_ready(path: Path) -> Callable[[], bool]:
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


def https_self_signed_ok(port: int, path: str = "/healthz") -> Callable[[], bool]:
    """Ready when a component's own (self-signed) HTTPS endpoint answers 200."""
    return http_ok(
        f"https://127.0.0.1:{port}{path}", ssl._create_unverified_context()
    )  # its own throw-away serving certificate
