"""Claiming due rows for one worker at a time: a short lease kept in the row itself.

Both outboxes of the API use it: queued containers (the submission worker) and webhook
deliveries (the dispatcher). A row is due when its ``next_attempt_at`` has come and no
live worker holds it (``claimed_until`` empty or past). On PostgreSQL the rows are read
``FOR UPDATE SKIP LOCKED`` so that replicas claiming at once take different rows; SQLite
serialises writers, which gives the same outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import or_
from sqlmodel import Session, col, select

from services.api.domain.models import utcnow

Row = TypeVar("Row")


def claim_due(
    session: Session,
    model: type[Row],
    *where: Any,
    order_by: Sequence[Any],
    claim_seconds: float,
    limit: int,
    **stamp: Any,
) -> list[Row]:
    """Claim up to ``limit`` due rows of ``model`` matching ``where`` for ``claim_seconds``;
    ``stamp``: other columns to set on the claimed rows (e.g. which replica holds them)."""
    now = utcnow()
    next_attempt_at = col(model.next_attempt_at)  # type: ignore[attr-defined]  # every claimable model has it
    claimed_until = col(model.claimed_until)  # type: ignore[attr-defined]  # every claimable model has it
    stmt = (
        select(model)
        .where(*where, next_attempt_at <= now, or_(claimed_until.is_(None), claimed_until < now))
        .order_by(*order_by)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list(session.exec(stmt).all())
    until = now + timedelta(seconds=claim_seconds)
    for row in rows:
        row.claimed_until = until  # type: ignore[attr-defined]
        for name, value in stamp.items():
            setattr(row, name, value)
        session.add(row)
    session.commit()
    for row in rows:
        session.refresh(row)
    return rows
