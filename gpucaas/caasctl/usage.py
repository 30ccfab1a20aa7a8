"""``caasctl usage``: GPU-seconds used, per UTC day or per container run, from ``GET /v1/usage``
(a tenant token: its own; an admin token: every tenancy, or ``--tenancy``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from gpucaas.caasctl.output import Format, emit


class GroupBy(StrEnum):
    day = "day"
    container = "container"


DAY_COLUMNS = [
    ("DAY", lambda r: r["day"]),
    ("TENANCY", lambda r: r["tenancy"]),
    ("CONTAINERS", lambda r: r["containers"]),
    ("GPU-SECONDS", lambda r: f"{r['gpu_seconds']:g}"),
    ("GPU-HOURS", lambda r: f"{r['gpu_hours']:.3f}"),
]
CONTAINER_COLUMNS = [
    ("CONTAINER", lambda r: r["container_id"]),
    ("TENANCY", lambda r: r["tenancy"]),
    ("GPUs", lambda r: r["gpus"]),
    ("MODEL", lambda r: r.get("gpu_model")),
    ("NODE", lambda r: r.get("node_name")),
    ("CLASS", lambda r: "interruptible" if r.get("interruptible") else "standard"),
    ("STARTED", lambda r: r["started_at"]),
    ("FINISHED", lambda r: r.get("finished_at") or "running"),
    ("GPU-SECONDS", lambda r: f"{r['gpu_seconds']:g}"),
]


def register(app: typer.Typer, api_of: Any) -> None:
    """Add ``usage`` to caasctl's root ``app``; ``api_of(ctx)`` gives the REST client."""

    @app.command("usage")
    def usage(
        ctx: typer.Context,
        from_: Annotated[
            str | None,
            typer.Option("--from", help="Start: YYYY-MM-DD or ISO 8601 (UTC); default: the 1st of this month."),
        ] = None,
        to: Annotated[str | None, typer.Option("--to", help="End (exclusive); default: now.")] = None,
        group_by: Annotated[GroupBy, typer.Option("--group-by", help="day or container.")] = GroupBy.day,
        tenancy: Annotated[str | None, typer.Option(help="With an admin token: only this tenancy.")] = None,
        output: Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")] = Format.table,
    ) -> None:
        """GPU-seconds used: per day or per container, from each container's own start and end."""
        params = {"from": from_, "to": to, "group_by": group_by.value, "tenancy": tenancy}
        report = api_of(ctx).get("/v1/usage", **params)
        if output is not Format.table:
            emit(report, output)
            return
        title = (
            f"GPU usage {report['from']} to {report['to']}: {report['total_gpu_seconds']:g} GPU-seconds "
            f"({report['total_gpu_hours']:.3f} GPU-hours)"
        )
        emit(report["data"], output, DAY_COLUMNS if group_by is GroupBy.day else CONTAINER_COLUMNS, title=title)
