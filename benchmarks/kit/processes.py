"""The helper processes a benchmark starts beside what it measures (``gpucaas`` sub-commands,
kwok): each with its output in a log file, killed with this process however it ends
(:func:`devtools.children.popen`), and stopped politely first."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gpucaas_command(*args: str) -> list[str]:
    """``gpucaas <args>`` run by this interpreter (this checkout's code)."""
    return [sys.executable, "-m", "gpucaas", *args]


def start(
    args: Sequence[str],
    log: Path | None,
    *,
    env: dict[str, str] | None = None,
    unset: Sequence[str] = (),
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """``args`` in the repository's root with this environment plus ``env``, less ``unset``;
    stdout and stderr to ``log`` (nowhere when None)."""
    from devtools.children import popen

    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    try:
        return popen(
            list(args), stdout=out, stderr=subprocess.STDOUT, env=environ, cwd=ROOT, start_new_session=new_session
        )
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]  # the child holds its own copy


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
