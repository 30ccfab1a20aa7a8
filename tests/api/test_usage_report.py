"""The pure usage arithmetic: clipping runs to a window, splitting them at UTC midnights,
running runs counted up to now, month bounds, CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

from services.api.usage import report
from services.api.usage.records import UsageRecord


def t(day: int, hour: int = 0, minute: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def rec(cid: str, gpus: int, start: datetime, end: datetime | None, tenancy: str = "acme") -> UsageRecord:
    return UsageRecord(container_id=cid, tenancy=tenancy, gpus=gpus, started_at=start, finished_at=end)


NOW = t(25, 12)


def test_a_run_across_midnight_is_split_between_the_days() -> None:
    rows = [rec("a", 2, t(20, 23), t(21, 1, 30))]  # 1 h on the 20th, 1.5 h on the 21st, 2 GPUs
    days = report.by_day(rows, start=t(1), end=NOW, now=NOW)
    assert [(d["day"], d["gpu_seconds"], d["containers"]) for d in days] == [
        ("2026-11-20", 7200.0, 1),
        ("2026-11-21", 10800.0, 1),
    ]
    assert report.total_seconds(rows, start=t(1), end=NOW, now=NOW) == 18000.0


def test_the_window_clips_runs_and_a_running_run_counts_up_to_now() -> None:
    rows = [rec("a", 1, t(20, 10), t(20, 12)), rec("b", 4, t(25, 11), None)]
    inside = report.by_container(rows, start=t(20, 11), end=t(30), now=NOW)
    assert [(r["container_id"], r["gpu_seconds"], r["running"]) for r in inside] == [
        ("a", 3600.0, False),
        ("b", 4 * 3600.0, True),
    ]
    assert inside[1]["finished_at"] is None and inside[0]["finished_at"] == "2026-11-20T12:00:00Z"
    # a window that ends before the run started leaves it out
    assert report.by_container(rows, start=t(1), end=t(20, 10), now=NOW) == []
    per_tenancy = report.by_day([*rows, rec("c", 8, t(22), t(22, 0, 30), tenancy="zeta")], start=t(1), end=NOW, now=NOW)
    assert [(d["day"], d["tenancy"]) for d in per_tenancy] == [
        ("2026-11-20", "acme"),
        ("2026-11-22", "zeta"),
        ("2026-11-25", "acme"),
    ]


def test_month_bounds_roll_over_the_year() -> None:
    assert report.month_bounds(t(25, 12)) == (t(1), t(1, month=12))
    assert report.month_bounds(datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == (
        datetime(2026, 12, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
    )


def test_csv_has_a_header_and_empty_cells_for_nulls() -> None:
    rows = report.by_container([rec("a", 1, t(20, 10), t(20, 10, 1))], start=t(1), end=NOW, now=NOW)
    text = report.to_csv(rows, report.CONTAINER_COLUMNS)
    assert text.splitlines()[0] == ",".join(report.CONTAINER_COLUMNS)
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert (row["gpu_model"], row["gpu_seconds"], row["running"]) == ("", "60.0", "False")
