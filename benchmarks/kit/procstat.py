"""What ``/proc`` says of a running process: CPU seconds used, resident and proportional memory,
threads (Linux's proc(5): ``stat`` fields 14 and 15, ``status``, ``smaps_rollup``).

CPU time is the figure least disturbed by other load on a shared machine: a benchmark reads
it before and after what it measures and divides by the work done (:func:`cpu_ms_per`).
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (``OSError`` once it is gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_of(*pids: int | None) -> float | None:
    """CPU seconds the processes have used so far, together; None when one of them is not running."""
    total = 0.0
    for pid in pids:
        if pid is None:
            return None
        try:
            total += cpu_seconds(pid)
        except OSError:
            return None
    return total


def cpu_ms_per(before: float | None, after: float | None, count: int) -> float | None:
    """Milliseconds of CPU per unit of work between two readings; None where either is missing or no work was done."""
    if before is None or after is None or not count:
        return None
    return round((after - before) * 1000 / count, 2)


def _status_field(pid: int, name: str) -> int | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    return None


def rss_mb(pid: int) -> float:
    """Resident memory (``VmRSS``), MiB."""
    kib = _status_field(pid, "VmRSS")
    if kib is None:
        raise RuntimeError(f"no VmRSS for pid {pid}")
    return kib / 1024


def threads(pid: int) -> int:
    return _status_field(pid, "Threads") or 0


def pss_mb(pid: int) -> float | None:
    """Proportional memory (shared pages split between the processes mapping them), MiB; None where unreadable."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None
