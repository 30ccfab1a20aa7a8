"""A private ``libvirtd`` (+ ``virtlogd``) for booting the test image, started and stopped by PID.

Debian 12 ships the monolithic ``libvirtd`` (no ``virtqemud``) and these machines
have no systemd, so the tests and the replay benchmark start the daemons
themselves, ``virtlogd -d`` then ``libvirtd -d``, in *session* mode as a
dedicated unprivileged system user (``gpucaas-vmtest``, created when missing):

- everything is private: config, state, logs, pid files and the client socket
  live in one work directory (``XDG_CONFIG_HOME`` / ``XDG_RUNTIME_DIR`` /
  ``unix_sock_dir``); nothing under /etc/libvirt or /run/libvirt is touched, and
  no other libvirtd on the machine is disturbed;
- it is fast: here /dev/kvm is root-only and does not boot guests; a
  privileged libvirtd finds KVM when probing QEMU but not usable by
  ``libvirt-qemu`` afterwards, so it re-probes QEMU (about 4 s) on every call.
  Unprivileged, KVM is consistently absent and the capability cache (kept in
  a shared ``XDG_CACHE_HOME``) stays valid; domains use ``type='qemu'`` (TCG).

The root test process connects to ``qemu+unix:///session?socket=<dir>/run/libvirt-sock``
(socket mode 0777, no auth; the directory is private to the test). A session
daemon cannot pass PCI devices through -- neither could this machine.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

LIBVIRTD = "/usr/sbin/libvirtd"
VIRTLOGD = "/usr/sbin/virtlogd"
QEMU = "qemu-system-x86_64"
USER = "gpucaas-vmtest"
HOME = Path("/var/lib/gpucaas-vmtest")


class DaemonUnavailable(RuntimeError):
    """libvirtd/QEMU cannot be run here (missing binaries, not root, start failed)."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def ensure_user() -> pwd.struct_passwd:
    """The unprivileged user the session daemon runs as; created (system user) if missing."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise DaemonUnavailable(f"user {USER} missing and not root to create it") from None
    subprocess.run(
        ["useradd", "--system", "--user-group", "--home-dir", str(HOME), "--shell", "/usr/sbin/nologin", USER],
        check=True,
        capture_output=True,
    )
    log.info("created system user %s", USER)
    return pwd.getpwnam(USER)


class PrivateLibvirtd:
    """Start ``virtlogd`` and ``libvirtd`` (session mode, private dirs); stop them by PID."""

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.socket: Path | None = None
        self.uri = ""
        self.pids: dict[str, int] = {}
        self._user: pwd.struct_passwd | None = None

    def _env(self) -> dict[str, str]:
        assert self.workdir is not None
        return {
            "HOME": str(HOME),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "XDG_RUNTIME_DIR": str(self.workdir / "run"),
            "XDG_CONFIG_HOME": str(self.workdir / "config"),
            "XDG_CACHE_HOME": str(HOME / "cache"),  # QEMU capability cache, shared across runs
            "LC_ALL": "C",
        }

    def _start(self, name: str, binary: str, conf: str, ready: Path, timeout_s: float = 60.0) -> None:
        assert self.workdir is not None and self._user is not None
        cfg = self.workdir / f"{name}.conf"
        cfg.write_text(conf)
        pidfile = self.workdir / f"{name}.pid"
        res = subprocess.run(
            [binary, "-d", "-f", str(cfg), "-p", str(pidfile)],
            env=self._env(),
            user=self._user.pw_uid,
            group=self._user.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.workdir,
        )
        if res.returncode != 0:
            raise DaemonUnavailable(f"{binary} -d failed ({res.returncode}): {res.stderr.strip()[-400:]}")
        deadline = time.monotonic() + timeout_s
        while not (pidfile.exists() and pidfile.read_text().strip() and ready.exists()):
            if time.monotonic() > deadline:
                raise DaemonUnavailable(f"{name} did not come up (see {self.workdir}/{name}.log)")
            time.sleep(0.05)
        self.pids[name] = int(pidfile.read_text().strip())
        log.info("started %s (pid %d, user %s) in %s", name, self.pids[name], USER, self.workdir)

    def start(self) -> PrivateLibvirtd:
        for b in (LIBVIRTD, VIRTLOGD):
            if not os.access(b, os.X_OK):
                raise DaemonUnavailable(f"{b} not installed (apt: libvirt-daemon libvirt-daemon-driver-qemu)")
        if shutil.which(QEMU) is None:
            raise DaemonUnavailable(f"{QEMU} not installed (apt: qemu-system-x86)")
        if os.geteuid() != 0:
            raise DaemonUnavailable("starting the daemons as their own user needs root")
        self._user = ensure_user()
        uid, gid = self._user.pw_uid, self._user.pw_gid
        for d in (HOME, HOME / "cache"):
            d.mkdir(mode=0o755, exist_ok=True)
            os.chown(d, uid, gid)
        self.workdir = Path(tempfile.mkdtemp(prefix="lv-", dir=HOME))
        for d in (self.workdir, self.workdir / "run", self.workdir / "config"):
            d.mkdir(exist_ok=True)
            os.chown(d, uid, gid)
        os.chmod(self.workdir, 0o755)
        self.socket = self.workdir / "run" / "libvirt-sock"
        self.uri = f"qemu+unix:///session?socket={self.socket}"
        try:
            self._start(
                "virtlogd",
                VIRTLOGD,
                f'log_outputs = "3:file:{self.workdir}/virtlogd.log"\n',
                self.workdir / "run" / "libvirt" / "virtlogd-sock",
            )
            self._start(
                "libvirtd",
                LIBVIRTD,
                "\n".join(
                    [
                        f'unix_sock_dir = "{self.workdir / "run"}"',
                        'unix_sock_rw_perms = "0777"',
                        'unix_sock_ro_perms = "0777"',
                        'auth_unix_rw = "none"',
                        'auth_unix_ro = "none"',
                        f'log_outputs = "3:file:{self.workdir}/libvirtd.log"',
                        "",
                    ]
                ),
                self.socket,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def qemu_pid(self, domain: str) -> int | None:
        """PID of the QEMU process of a running domain of this daemon."""
        if self.workdir is None:
            return None
        p = self.workdir / "run" / "libvirt" / "qemu" / "run" / f"{domain}.pid"
        try:
            pid = int(p.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM each daemon we started (libvirtd first), by PID; SIGKILL after ``timeout_s``."""
        for name in ("libvirtd", "virtlogd"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + timeout_s
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
            log.info("stopped %s (pid %d)", name, pid)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> PrivateLibvirtd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
