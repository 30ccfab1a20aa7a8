"""Queries and writes of webhooks, deliveries and attempts; callers own the session.

Every read by a tenant is filtered by its tenancy, so another tenancy's webhook is
simply not found. The dispatcher claims due deliveries like the submission worker
claims due containers (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, a short claim so
other replicas skip them while one sends).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, update
from sqlmodel import Session, col, delete, select

from services.api.db import row_claims
from services.api.domain.models import utcnow
from services.api.security import bearer
from services.api.webhooks.models import (
    DELIVERED,
    FAILED,
    PENDING,
    Webhook,
    WebhookAttempt,
    WebhookCreate,
    WebhookDelivery,
)

ATTEMPTS_SHOWN = 20


def count(session: Session, *, tenancy: str) -> int:
    return int(session.exec(select(func.count()).select_from(Webhook).where(Webhook.tenancy == tenancy)).one())


def create(session: Session, *, tenancy: str, data: WebhookCreate, webhook_id: str) -> Webhook:
    row = Webhook(id=webhook_id, tenancy=tenancy, url=data.url, events=list(data.events), description=data.description)
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def new_id() -> str:
    return bearer.new_id("wh_", nbytes=10)


def list_for(session: Session, *, tenancy: str) -> Sequence[Webhook]:
    return session.exec(select(Webhook).where(Webhook.tenancy == tenancy).order_by(col(Webhook.created_at))).all()


def get(session: Session, *, tenancy: str, webhook_id: str) -> Webhook | None:
    return session.exec(select(Webhook).where(Webhook.tenancy == tenancy, Webhook.id == webhook_id)).first()


def _drop(session: Session, webhook_ids: Sequence[str]) -> None:
    if not webhook_ids:
        return
    session.exec(delete(WebhookAttempt).where(col(WebhookAttempt.webhook_id).in_(webhook_ids)))
    session.exec(delete(WebhookDelivery).where(col(WebhookDelivery.webhook_id).in_(webhook_ids)))
    session.exec(delete(Webhook).where(col(Webhook.id).in_(webhook_ids)))


def remove(session: Session, *, tenancy: str, webhook_id: str) -> bool:
    """Delete the webhook with its deliveries and their attempts (nothing more is sent)."""
    if get(session, tenancy=tenancy, webhook_id=webhook_id) is None:
        return False
    _drop(session, [webhook_id])
    session.commit()
    return True


def forget_tenancy(session: Session, *, tenancy: str) -> None:
    """Drop a deleted tenancy's webhooks (the caller commits): a new tenancy of the same
    name starts with none."""
    ids = session.exec(select(Webhook.id).where(Webhook.tenancy == tenancy)).all()
    _drop(session, list(ids))


def deliveries(
    session: Session, *, webhook_id: str, status: str | None, limit: int, offset: int
) -> tuple[Sequence[WebhookDelivery], dict[str, list[WebhookAttempt]], int]:
    """A page of the webhook's deliveries, newest first, with their latest attempts."""
    conds = [WebhookDelivery.webhook_id == webhook_id]
    if status is not None:
        conds.append(WebhookDelivery.status == status)
    total = int(session.exec(select(func.count()).select_from(WebhookDelivery).where(*conds)).one())
    rows = session.exec(
        select(WebhookDelivery)
        .where(*conds)
        .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id))
        .offset(offset)
        .limit(limit)
    ).all()
    return rows, attempts_of(session, [r.id for r in rows]), total


def attempts_of(session: Session, delivery_ids: Sequence[str]) -> dict[str, list[WebhookAttempt]]:
    found: dict[str, list[WebhookAttempt]] = {d: [] for d in delivery_ids}
    if not delivery_ids:
        return found
    for a in session.exec(
        select(WebhookAttempt)
        .where(col(WebhookAttempt.delivery_id).in_(delivery_ids))
        .order_by(col(WebhookAttempt.number).desc())
    ).all():
        if len(found[a.delivery_id]) < ATTEMPTS_SHOWN:
            found[a.delivery_id].append(a)
    return found


def get_delivery(session: Session, *, webhook_id: str, delivery_id: str) -> WebhookDelivery | None:
    return session.exec(
        select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.id == delivery_id)
    ).first()


def resend(session: Session, *, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send again now, with a fresh retry window (also after it was delivered or given up)."""
    now = utcnow()
    session.exec(
        update(WebhookDelivery)
        .where(col(WebhookDelivery.id) == delivery.id)
        .values(status=PENDING, next_attempt_at=now, window_start=now, claimed_until=None, delivered_at=None)
    )
    session.commit()
    session.refresh(delivery)
    return delivery


# --- dispatcher side -------------------------------------------------------------


def claim_due(session: Session, *, claim_seconds: float, limit: int = 16) -> list[WebhookDelivery]:
    """Claim pending deliveries whose next attempt is due and that no dispatcher holds."""
    return row_claims.claim_due(
        session,
        WebhookDelivery,
        WebhookDelivery.status == PENDING,
        order_by=(col(WebhookDelivery.next_attempt_at),),
        claim_seconds=claim_seconds,
        limit=limit,
    )


def webhook_by_id(session: Session, *, webhook_id: str) -> Webhook | None:
    return session.get(Webhook, webhook_id)


def record_attempt(
    session: Session,
    *,
    delivery: WebhookDelivery,
    started_at: datetime,
    duration_ms: float,
    status_code: int | None,
    error: str | None,
    next_attempt_at: datetime | None,
    delivered: bool,
) -> None:
    """Log one attempt and move the delivery on: delivered, due again at ``next_attempt_at``,
    or (neither) given up."""
    number = delivery.attempts + 1
    attempt = WebhookAttempt(
        id=bearer.new_id("wha_", nbytes=12),
        delivery_id=delivery.id,
        webhook_id=delivery.webhook_id,
        number=number,
        started_at=started_at,
        duration_ms=round(duration_ms, 1),
        status_code=status_code,
        error=None if error is None else error[:1024],
        next_attempt_at=None if delivered else next_attempt_at,
    )
    values: dict[str, object] = {
        "attempts": number,
        "claimed_until": None,
        "last_status_code": status_code,
        "last_error": None if error is None else error[:1024],
    }
    if delivered:
        values.update(status=DELIVERED, delivered_at=utcnow())
    elif next_attempt_at is not None:
        values.update(next_attempt_at=next_attempt_at)
    else:
        values.update(status=FAILED)
    result = session.exec(update(WebhookDelivery).where(col(WebhookDelivery.id) == delivery.id).values(**values))
    if not result.rowcount:  # its webhook was deleted meanwhile, with its deliveries: log nothing
        session.rollback()
        return
    session.add(attempt)
    session.commit()


def prune(session: Session, *, before: datetime) -> int:
    """Forget finished deliveries (delivered or failed) created before ``before``, with their
    attempts; pending ones stay whatever their age. Returns how many went."""
    old = list(
        session.exec(
            select(WebhookDelivery.id)
            .where(col(WebhookDelivery.status) != PENDING, col(WebhookDelivery.created_at) < before)
            .limit(10_000)
        ).all()
    )
    if old:
        session.exec(delete(WebhookAttempt).where(col(WebhookAttempt.delivery_id).in_(old)))
        session.exec(delete(WebhookDelivery).where(col(WebhookDelivery.id).in_(old)))
    session.commit()
    return len(old)
