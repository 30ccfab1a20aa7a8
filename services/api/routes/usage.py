"""GPU usage: ``GET /v1/usage`` (a tenant's own; an admin names a tenancy or sees all) and
``GET /v1/admin/usage`` (every tenancy). Both answer JSON, or CSV with ``Accept: text/csv``."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

from services.api import errors
from services.api.domain.models import TenancyName, _as_utc, utcnow
from services.api.routes.deps import AdminUser, CurrentTenant, SessionDep
from services.api.usage import records, report
from services.api.usage.shapes import UsageReport

router = APIRouter(prefix="/v1/usage", tags=["usage"])
admin_router = APIRouter(prefix="/v1/admin/usage", tags=["admin"])

DATE_HELP = "YYYY-MM-DD (00:00 UTC) or an ISO 8601 time such as 2026-11-01T00:00:00Z"
# The schema states the shape (digits, '-', ':', 'T', '.', '+', 'Z'); parse_time checks it and says what
# is wrong, as for any other value.
_TIME_SHAPE = {"pattern": r"^[0-9][0-9:.+TZtz-]*$"}
From = Annotated[
    str | None,
    Query(
        alias="from",
        max_length=64,
        json_schema_extra=_TIME_SHAPE,
        description=f"Window start, {DATE_HELP}; default: the 1st of this month.",
    ),
]
To = Annotated[
    str | None,
    Query(
        max_length=64, json_schema_extra=_TIME_SHAPE, description=f"Window end (exclusive), {DATE_HELP}; default: now."
    ),
]
GroupBy = Annotated[
    Literal["day", "container"],
    Query(description="day: one row per UTC day and tenancy; container: one row per container run."),
]
_CSV: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/csv": {"schema": {"type": "string"}}},
        "description": "The report; CSV (RFC 4180, a header row) with Accept: text/csv.",
    }
}


def parse_time(field: str, value: str | None, default: datetime) -> datetime:
    if value is None:
        return default
    try:
        if len(value) == 10:
            d = date.fromisoformat(value)
            return datetime(d.year, d.month, d.day, tzinfo=UTC)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return _as_utc(parsed).astimezone(UTC)  # type: ignore[union-attr]
    except (ValueError, OverflowError):  # OverflowError: year 1 or 9999 moved across midnight UTC
        raise errors.Invalid(f"{field}: {value!r} is not a date or time; use {DATE_HELP}") from None


def _window(from_: str | None, to: str | None) -> tuple[datetime, datetime, datetime]:
    now = utcnow()
    start = parse_time("from", from_, report.month_bounds(now)[0])
    end = parse_time("to", to, now)
    if start > end:
        raise errors.Invalid(
            f"from: {report.stamp(start)} is after to ({report.stamp(end)}); give a window whose start comes first"
        )
    return start, end, now


def _answer(
    request: Request,
    session: SessionDep,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    group_by: str,
    tenancy: str | None,
    current_only: bool,
) -> Any:
    rows = records.overlapping(session, start=start, end=end, tenancy=tenancy, current_only=current_only)
    columns: tuple[str, ...]
    if group_by == "day":
        data, columns = report.by_day(rows, start=start, end=end, now=now), report.DAY_COLUMNS
    else:
        data, columns = report.by_container(rows, start=start, end=end, now=now), report.CONTAINER_COLUMNS
    if "text/csv" in request.headers.get("accept", ""):
        return Response(
            report.to_csv(data, columns),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="gpu-usage-{group_by}.csv"'},
        )
    total = report.total_seconds(rows, start=start, end=end, now=now)
    return UsageReport.model_validate(
        {
            "from": report.stamp(start),
            "to": report.stamp(end),
            "group_by": group_by,
            "tenancy": tenancy,
            "total_gpu_seconds": round(total, 3),
            "total_gpu_hours": round(total / 3600, 6),
            "data": data,
            "count": len(data),
        }
    )


@router.get("", response_model=UsageReport, response_model_by_alias=True, responses=_CSV)
def tenant_usage(
    request: Request,
    session: SessionDep,
    caller: CurrentTenant,
    from_: From = None,
    to: To = None,
    group_by: GroupBy = "day",
    tenancy: Annotated[
        TenancyName | None,
        Query(description="Tenant tokens: your own (may be left out). Admin tokens: whose; left out: every tenancy."),
    ] = None,
) -> Any:
    """GPU-seconds used, from each container's own start and end times (never time queued)."""
    start, end, now = _window(from_, to)
    current_only = not caller.is_admin
    if not caller.is_admin:
        if tenancy is not None and tenancy != caller.tenancy:
            raise errors.NotFound(f"tenancy {tenancy!r} not found")  # exactly as for a tenancy that does not exist
        tenancy = caller.tenancy
    return _answer(
        request, session, start=start, end=end, now=now, group_by=group_by, tenancy=tenancy, current_only=current_only
    )


@admin_router.get("", response_model=UsageReport, response_model_by_alias=True, responses=_CSV)
def admin_usage(
    request: Request,
    session: SessionDep,
    _admin: AdminUser,
    from_: From = None,
    to: To = None,
    group_by: GroupBy = "day",
    tenancy: Annotated[TenancyName | None, Query(description="Only this tenancy (deleted ones included).")] = None,
) -> Any:
    """Every tenancy's GPU usage (``Accept: text/csv`` for a spreadsheet or billing import)."""
    start, end, now = _window(from_, to)
    return _answer(
        request, session, start=start, end=end, now=now, group_by=group_by, tenancy=tenancy, current_only=False
    )
