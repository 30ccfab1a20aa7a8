"""Monthly GPU-hour budgets: admission refuses a submission once the tenancy's UTC calendar
month has used its ``gpu_hours_per_month`` (runs still going count up to now). Called at one
line of the submission path for tenancies that have a budget (the one-statement admission
admits the others: services/api/store/admission.py, admit_container)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from services.api import errors
from services.api.domain.models import Tenancy, utcnow
from services.api.usage import records, report


class BudgetSpent(errors.ApiError):
    status = 403
    code = "gpu_budget_spent"


def used_this_month(session: Session, *, tenancy: Tenancy, now: datetime) -> float:
    """GPU-seconds the tenancy has used in the month holding ``now``."""
    start, end = report.month_bounds(now)
    rows = records.overlapping(session, start=start, end=end, tenancy=tenancy.name, current_only=True)
    return report.total_seconds(rows, start=start, end=end, now=now)


def check(session: Session, *, tenancy: Tenancy, now: datetime | None = None) -> None:
    """Raise ``BudgetSpent`` (403) when the tenancy's monthly GPU-hour budget is spent."""
    budget = tenancy.gpu_hours_per_month
    if budget is None:
        return
    now = now or utcnow()
    used = used_this_month(session, tenancy=tenancy, now=now) / 3600
    if used < budget:
        return
    session.rollback()  # let go of the tenancy's row lock before answering
    resets = report.month_bounds(now)[1].strftime("%Y-%m-%dT%H:%M:%SZ")
    raise BudgetSpent(
        f"GPU-hour budget spent for tenancy {tenancy.name!r}: {used:.2f} of {budget:g} GPU-hours used in "
        f"{now.strftime('%B %Y')} (UTC); submissions are accepted again from {resets}, or an admin can raise "
        "gpu_hours_per_month",
        budget_gpu_hours=budget,
        used_gpu_hours=round(used, 6),
        resets_at=resets,
    )
