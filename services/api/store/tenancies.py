"""Tenancies: create, update, list and delete them, and their GPU counters
(``gpus_in_use``, kept exact by the triggers of migration 0006; recomputed at start-up by
:func:`reconcile_gpu_usage`). Deleting a tenancy cancels its active containers, drops its
tokens and keeps its containers as history. Callers own the session."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import func, update
from sqlalchemy.exc import IntegrityError, InvalidRequestError
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session, col, delete, select

from services.api import errors
from services.api.domain.models import (
    ACTIVE_STATUSES,
    ApiToken,
    Container,
    ContainerStatus,
    Tenancy,
    TenancyCreate,
    TenancyUpdate,
    quota_problem,
    utcnow,
)
from services.api.security import revocations, token_cache
from services.api.store import audit
from services.api.store.dialect import is_postgres
from services.api.usage import records as usage_records
from services.api.webhooks import store as webhook_store

log = logging.getLogger(__name__)


def get_tenancy(session: Session, *, name: str, lock: bool = False) -> Tenancy | None:
    stmt = select(Tenancy).where(Tenancy.name == name)
    if lock and is_postgres(session):
        stmt = stmt.with_for_update()
    return session.exec(stmt).first()


def create_tenancy(session: Session, *, data: TenancyCreate) -> Tenancy:
    if get_tenancy(session, name=data.name) is not None:
        raise errors.Conflict(f"tenancy {data.name!r} already exists")
    row = Tenancy(
        name=data.name,
        gpu_quota=data.gpu_quota,
        pod_quota=data.pod_quota,
        guaranteed_gpus=data.guaranteed_gpus,
        weight=data.weight,
        allow_internet=data.allow_internet,
        nfs=data.nfs.model_dump() if data.nfs else None,
        gpu_hours_per_month=data.gpu_hours_per_month,
    )
    session.add(row)
    try:
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise errors.Conflict(f"tenancy {data.name!r} already exists") from exc
    session.refresh(row)
    return row


def ensure_tenancy(session: Session, *, name: str, gpu_quota: int, pod_quota: int) -> Tenancy:
    """The tenancy ``name``, created with the given quotas if it has never been seen."""
    row = get_tenancy(session, name=name)
    if row is not None:
        return row
    try:
        return create_tenancy(session, data=TenancyCreate(name=name, gpu_quota=gpu_quota, pod_quota=pod_quota))
    except errors.Conflict:
        row = get_tenancy(session, name=name)
        assert row is not None
        return row


def update_tenancy(session: Session, *, tenancy: Tenancy, data: TenancyUpdate) -> Tenancy:
    problem = quota_problem(
        data.gpu_quota if data.gpu_quota is not None else tenancy.gpu_quota,
        data.pod_quota if data.pod_quota is not None else tenancy.pod_quota,
        data.guaranteed_gpus if data.guaranteed_gpus is not None else tenancy.guaranteed_gpus,
    )
    if problem:
        raise errors.Invalid(problem)
    name = tenancy.name
    for field in ("gpu_quota", "pod_quota", "guaranteed_gpus", "weight", "allow_internet", "gpu_hours_per_month"):
        value = getattr(data, field)
        if value is not None:
            setattr(tenancy, field, value)
    if data.clear_gpu_hours_per_month:
        tenancy.gpu_hours_per_month = None
    if data.clear_nfs:
        tenancy.nfs = None
    elif data.nfs is not None:
        tenancy.nfs = data.nfs.model_dump()
    tenancy.updated_at = utcnow()
    tenancy.revision = Tenancy.revision + 1  # in SQL: two concurrent changes make two bumps
    session.add(tenancy)
    try:
        session.commit()
        session.refresh(tenancy)
    except (StaleDataError, InvalidRequestError) as exc:  # deleted by a concurrent request
        session.rollback()
        raise errors.NotFound(f"tenancy {name!r} not found") from exc
    return tenancy


def unpushed(session: Session, *, limit: int = 100) -> Sequence[Tenancy]:
    """Tenancies whose custom resource has not received their latest revision."""
    stmt = select(Tenancy).where(col(Tenancy.pushed_revision) < col(Tenancy.revision))
    return session.exec(stmt.order_by(col(Tenancy.updated_at)).limit(limit)).all()


def mark_pushed(session: Session, *, name: str, revision: int) -> None:
    """The custom resource now has ``revision`` of the tenancy (a later change stays unpushed)."""
    session.exec(
        update(Tenancy)
        .where(col(Tenancy.name) == name, col(Tenancy.pushed_revision) < revision)
        .values(pushed_revision=revision)
    )
    session.commit()


def list_tenancies(session: Session) -> Sequence[Tenancy]:
    return session.exec(select(Tenancy).order_by(Tenancy.name)).all()


def delete_tenancy(session: Session, *, name: str) -> int:
    """Remove the tenancy and its tokens; its active containers become Cancelled (the
    worker deletes their pods) and all its containers stay as history, hidden from a
    new tenancy of the same name, until retention prunes them. Returns how many
    containers were cancelled."""
    now = utcnow()
    cancelled = session.exec(
        update(Container)
        .where(col(Container.tenancy) == name, col(Container.status).in_(ACTIVE_STATUSES))
        .values(
            status=ContainerStatus.CANCELLED,
            message="cancelled: its tenancy was deleted",
            finished_at=now,
            updated_at=now,
            claimed_by=None,
            claimed_until=None,
        )
    ).rowcount
    session.exec(
        update(Container)
        .where(col(Container.tenancy) == name, col(Container.tenancy_deleted_at).is_(None))
        # an idempotency key belonged to the old tenancy: the name's next owner starts clean
        .values(tenancy_deleted_at=now, idempotency_key=None)
    )
    usage_records.mark_tenancy_deleted(session, tenancy=name, when=now)
    audit.forget_tenancy(session, tenancy=name, when=now)
    session.exec(delete(ApiToken).where(col(ApiToken.tenancy) == name))
    epoch = revocations.announce(session, tenancy=name)
    webhook_store.forget_tenancy(session, tenancy=name)
    session.exec(delete(Tenancy).where(col(Tenancy.name) == name))
    session.commit()
    token_cache.revoked(tenancy=name)
    revocations.wait_heard(session.get_bind(), epoch)  # type: ignore[arg-type]
    return int(cancelled or 0)


def active_gpus(session: Session, *, tenancy: str) -> int:
    """GPUs the tenancy's active containers hold: its counter (migration 0006), one row."""
    value = session.exec(select(Tenancy.gpus_in_use).where(Tenancy.name == tenancy)).first()
    return int(value or 0)


def active_gpus_by_tenancy(session: Session) -> dict[str, int]:
    return {name: int(n) for name, n in session.exec(select(Tenancy.name, Tenancy.gpus_in_use)).all()}


def reconcile_gpu_usage(session: Session) -> dict[str, tuple[int, int]]:
    """Recompute every tenancy's GPU counter from its active containers; returns the
    tenancies that had drifted as ``{name: (counter, actual)}`` (expected: none, the
    triggers of migration 0006 keep it exact).

    One tenancy at a time, its row locked first: an admission in flight holds that
    lock until it commits, so the sum read after taking it (a new statement, a new
    snapshot under READ COMMITTED) sees every admitted row.
    """
    drift: dict[str, tuple[int, int]] = {}
    names = list(session.exec(select(Tenancy.name)).all())
    session.commit()
    for name in names:
        counter = session.exec(select(Tenancy.gpus_in_use).where(Tenancy.name == name).with_for_update()).first()
        if counter is None:  # deleted meanwhile
            session.rollback()
            continue
        actual = int(
            session.exec(
                select(func.coalesce(func.sum(Container.gpus), 0)).where(
                    Container.tenancy == name, col(Container.status).in_(ACTIVE_STATUSES)
                )
            ).one()
        )
        if actual != counter:
            drift[name] = (int(counter), actual)
            session.exec(update(Tenancy).where(col(Tenancy.name) == name).values(gpus_in_use=actual))
        session.commit()
    if drift:
        log.warning("GPU counters corrected (tenancy: (counter, actual)): %s", drift)
    return drift
