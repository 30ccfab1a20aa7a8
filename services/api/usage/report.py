"""Pure usage reports: runs clipped to a window, grouped by UTC day or by container, and CSV.

A run still going counts up to ``now``; every figure is GPU-seconds (GPUs × seconds)."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from services.api.usage.records import RunRecord

GROUPS = ("day", "container")
DAY_COLUMNS = ("day", "tenancy", "gpu_seconds", "gpu_hours", "containers")
CONTAINER_COLUMNS = (
    "container_id",
    "attempt",
    "tenancy",
    "gpus",
    "gpu_model",
    "node_name",
    "nvlink_partition_size",
    "interruptible",
    "started_at",
    "finished_at",
    "running",
    "end_source",
    "gpu_seconds",
    "gpu_hours",
)


def stamp(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _span(row: RunRecord, start: datetime, end: datetime, now: datetime) -> tuple[datetime, datetime] | None:
    lo = max(row.started_at, start)
    hi = min(row.finished_at or now, end)
    return (lo, hi) if hi > lo else None


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 6)


def by_container(rows: Iterable[RunRecord], *, start: datetime, end: datetime, now: datetime) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        span = _span(row, start, end, now)
        seconds = row.gpus * (span[1] - span[0]).total_seconds() if span else 0.0
        if span is None and not (row.started_at >= start and row.started_at < end):
            continue  # touches the window at an edge only
        out.append(
            {
                "container_id": row.container_id,
                "attempt": row.run + 1,
                "tenancy": row.tenancy,
                "gpus": row.gpus,
                "gpu_model": row.gpu_model,
                "node_name": row.node_name,
                "nvlink_partition_size": row.nvlink_partition_size,
                "interruptible": row.interruptible,
                "started_at": stamp(row.started_at),
                "finished_at": stamp(row.finished_at),
                "running": row.finished_at is None,
                "end_source": row.end_source,
                "gpu_seconds": round(seconds, 3),
                "gpu_hours": _hours(seconds),
            }
        )
    return out


def by_day(rows: Iterable[RunRecord], *, start: datetime, end: datetime, now: datetime) -> list[dict[str, Any]]:
    seconds: dict[tuple[date, str], float] = defaultdict(float)
    runs: dict[tuple[date, str], set[str]] = defaultdict(set)
    for row in rows:
        span = _span(row, start, end, now)
        if span is None:
            continue
        lo, hi = span
        while lo < hi:  # split at UTC midnights
            midnight = datetime.combine(lo.date() + timedelta(days=1), time(), tzinfo=UTC)
            piece_end = min(hi, midnight)
            key = (lo.date(), row.tenancy)
            seconds[key] += row.gpus * (piece_end - lo).total_seconds()
            runs[key].add(row.container_id)
            lo = piece_end
    return [
        {
            "day": d.isoformat(),
            "tenancy": t,
            "gpu_seconds": round(s, 3),
            "gpu_hours": _hours(s),
            "containers": len(runs[(d, t)]),
        }
        for (d, t), s in sorted(seconds.items())
    ]


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar month holding ``now``: [1st 00:00, next 1st 00:00)."""
    first = datetime(now.year, now.month, 1, tzinfo=UTC)
    nxt = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=UTC)
    return first, nxt


def total_seconds(rows: Iterable[RunRecord], *, start: datetime, end: datetime, now: datetime) -> float:
    total = 0.0
    for row in rows:
        span = _span(row, start, end, now)
        if span:
            total += row.gpus * (span[1] - span[0]).total_seconds()
    return total


def to_csv(data: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\r\n", extrasaction="ignore")  # RFC 4180
    writer.writeheader()
    for item in data:
        writer.writerow({k: ("" if item.get(k) is None else item.get(k)) for k in columns})
    return buf.getvalue()
