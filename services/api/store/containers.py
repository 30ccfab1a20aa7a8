"""Container queries for the API's readers (one container, a page of them with the count
from the tenancy counters, those mounting a volume) and the cancellation a tenant asks
for. Callers own the session."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, func, literal, or_, tuple_, update
from sqlmodel import Session, col, select

from services.api.domain.models import (
    ACTIVE_STATUSES,
    CONTAINER_COUNT_COLUMNS,
    AuditAction,
    Container,
    ContainerStatus,
    Tenancy,
    utcnow,
)
from services.api.store import audit
from services.api.store.audit import Actor
from services.api.store.dialect import is_postgres
from services.api.webhooks import outbox as webhook_outbox

_CONTAINERS = Container.__table__  # type: ignore[attr-defined]


def get_container(session: Session, *, container_id: str, tenancy: str | None) -> Container | None:
    """The container, or None when it does not exist or is not the caller's (tenancy None = admin)."""
    stmt = select(Container).where(Container.id == container_id)
    if tenancy is not None:  # a tenant never sees a deleted namesake tenancy's history
        stmt = stmt.where(Container.tenancy == tenancy, col(Container.tenancy_deleted_at).is_(None))
    return session.exec(stmt).first()


def waiting_pods(session: Session, *, tenancy: str) -> dict[str, int]:
    """``{pod name: GPUs}`` of the tenancy's containers that wait with their pod made and on no
    node yet: those a queue position is asked for (:mod:`services.api.domain.queue`)."""
    rows = session.exec(
        select(Container.pod_name, Container.gpus).where(
            Container.tenancy == tenancy,
            col(Container.tenancy_deleted_at).is_(None),
            col(Container.status).in_((ContainerStatus.QUEUED, ContainerStatus.PENDING)),
            col(Container.pod_created).is_(True),
            col(Container.pod_deleted).is_(False),
            col(Container.node_name).is_(None),
        )
    ).all()
    return {name: gpus for name, gpus in rows}


def list_containers(
    session: Session,
    *,
    tenancy: str | None,
    status: str | None,
    limit: int,
    offset: int = 0,
    after: tuple[datetime, str] | None = None,
    history: bool = False,
) -> tuple[Sequence[Any], int, tuple[datetime, str] | None]:
    """A page of containers (rows with the columns as attributes), newest first (``created_at``
    then ``id``, both descending); ``history`` includes those of deleted tenancies (admin).

    ``after`` is the (created_at, id) of the last row of the previous page: the page
    then starts right after it (keyset pagination, an index range scan of
    ``ix_container_tenancy_created`` / ``ix_container_created_id`` however deep the
    page); ``offset`` still works and costs what it skips. Returns (rows, count of all
    matching rows — read from the tenancy counters, :func:`_count` —, the key of the last
    row when more may follow, else None).
    """
    conds: list[Any] = []
    if tenancy is not None:
        conds.append(Container.tenancy == tenancy)
    if not history:
        conds.append(col(Container.tenancy_deleted_at).is_(None))
    if status is not None:
        conds.append(Container.status == status)
    if history:  # deleted tenancies' containers too: no counter holds them, count the rows
        total = int(session.exec(select(func.count()).select_from(Container).where(*conds)).one())
    else:
        total = _count(session, tenancy=tenancy, status=status)
    page = list(conds)
    if after is not None:
        created, last_id = after
        if not is_postgres(session) and created.tzinfo is not None:  # SQLite keeps naive UTC
            created = created.astimezone(UTC).replace(tzinfo=None)
        page.append(tuple_(col(Container.created_at), col(Container.id)) < tuple_(literal(created), literal(last_id)))
    stmt = (
        # plain rows (attribute access by column name), not ORM objects: read-only here
        select(*_CONTAINERS.columns)
        .where(*page)
        .order_by(col(Container.created_at).desc(), col(Container.id).desc())
        .offset(offset)
        .limit(limit + 1)  # one more: is there a next page?
    )
    rows = list(session.execute(stmt).all())
    more = len(rows) > limit
    rows = rows[:limit]
    last = (rows[-1].created_at, rows[-1].id) if more and rows else None
    return rows, total, last


def _count(session: Session, *, tenancy: str | None, status: str | None) -> int:
    """How many live containers match (one tenancy's, or every live tenancy's): the tenancy
    rows' counters (migration 0009), not a count of container rows."""
    columns = (
        [CONTAINER_COUNT_COLUMNS[ContainerStatus(status)]]
        if status is not None
        else list(CONTAINER_COUNT_COLUMNS.values())
    )
    table = Tenancy.__table__  # type: ignore[attr-defined]
    per_row = sum((table.c[name] for name in columns[1:]), table.c[columns[0]])
    query = select(func.coalesce(func.sum(per_row), 0))
    if tenancy is not None:
        query = query.where(table.c.name == tenancy)
    return int(session.exec(query).one())


def containers_using_volume(session: Session, *, tenancy: str, volume: str) -> tuple[list[str], list[Any]]:
    """The tenancy's containers that mount ``volume``: the ids of the active ones (queued,
    pending, running), and the finished ones whose pod still exists (rows: ``id``,
    ``pod_name``), oldest first."""
    columns = (
        Container.id,
        Container.status,
        Container.pod_name,
        Container.pod_created,
        Container.pod_deleted,
        Container.volumes,
    )
    query = select(*columns)  # type: ignore[call-overload]  # sqlmodel types select() for up to 4 columns
    rows = session.exec(
        query.where(
            Container.tenancy == tenancy,
            col(Container.volumes).is_not(None),
            col(Container.tenancy_deleted_at).is_(None),
            or_(
                col(Container.status).in_([s.value for s in ACTIVE_STATUSES]),
                and_(col(Container.pod_created).is_(True), col(Container.pod_deleted).is_(False)),
            ),
        ).order_by(col(Container.created_at))
    ).all()
    mounting = [r for r in rows if any(m.get("name") == volume for m in r.volumes or ())]
    active = {s.value for s in ACTIVE_STATUSES}
    return ([r.id for r in mounting if r.status in active], [r for r in mounting if r.status not in active])


def cancel_container(session: Session, *, container: Container, actor: Actor | None = None) -> Container:
    """Mark an active container Cancelled (its ``container.cancel`` event in the same
    commit); the worker deletes its pod."""
    now = utcnow()
    before = container.status
    result = session.exec(
        update(Container)
        .where(col(Container.id) == container.id, col(Container.status).in_(ACTIVE_STATUSES))
        .values(status=ContainerStatus.CANCELLED, message="cancelled by request", finished_at=now, updated_at=now)
    )
    if result.rowcount:
        webhook_outbox.on_status_change(session, container_id=container.id, before=before)
        audit.record(
            session, actor, tenancy=container.tenancy, action=AuditAction.CONTAINER_CANCEL, target=container.id
        )
    session.commit()
    session.refresh(container)
    return container
