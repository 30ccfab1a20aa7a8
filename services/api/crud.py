"""Queries and writes, one keyword-only function each; callers own the session.

The container table is also the durable submission queue: a row is committed
(status ``Queued``) before the 202 goes out, and the worker claims due rows with
``FOR UPDATE SKIP LOCKED`` (on PostgreSQL; SQLite has one writer anyway), marking
them with a short claim so that other replicas skip them while it works.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, update
from sqlalchemy.exc import IntegrityError, InvalidRequestError
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session, col, delete, select

from services.api import errors, security
from services.api.models import (
    ACTIVE_STATUSES,
    ApiToken,
    Container,
    ContainerCreate,
    ContainerLog,
    ContainerStatus,
    Tenancy,
    TenancyCreate,
    TenancyUpdate,
    quota_problem,
    utcnow,
)
from services.api.pods import PodReport, pod_name

# SQLite has no row locks; one process-wide lock serialises quota check + insert there.
_sqlite_quota_lock = threading.Lock()


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


# --- tenancies -------------------------------------------------------------------


def get_tenancy(session: Session, *, name: str, lock: bool = False) -> Tenancy | None:
    stmt = select(Tenancy).where(Tenancy.name == name)
    if lock and _is_postgres(session):
        stmt = stmt.with_for_update()
    return session.exec(stmt).first()


def create_tenancy(session: Session, *, data: TenancyCreate) -> Tenancy:
    if get_tenancy(session, name=data.name) is not None:
        raise errors.Conflict(f"tenancy {data.name!r} already exists")
    row = Tenancy(
        name=data.name,
        gpu_quota=data.gpu_quota,
        pod_quota=data.pod_quota,
        allow_internet=data.allow_internet,
        nfs=data.nfs.model_dump() if data.nfs else None,
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
    problem = quota_problem(data.gpu_quota if data.gpu_quota is not None else tenancy.gpu_quota,
                            data.pod_quota if data.pod_quota is not None else tenancy.pod_quota)
    if problem:
        raise errors.Invalid(problem)
    name = tenancy.name
    for field in ("gpu_quota", "pod_quota", "allow_internet"):
        value = getattr(data, field)
        if value is not None:
            setattr(tenancy, field, value)
    if data.clear_nfs:
        tenancy.nfs = None
    elif data.nfs is not None:
        tenancy.nfs = data.nfs.model_dump()
    tenancy.updated_at = utcnow()
    session.add(tenancy)
    try:
        session.commit()
        session.refresh(tenancy)
    except (StaleDataError, InvalidRequestError) as exc:  # deleted by a concurrent request
        session.rollback()
        raise errors.NotFound(f"tenancy {name!r} not found") from exc
    return tenancy


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
        .values(status=ContainerStatus.CANCELLED, message="cancelled: its tenancy was deleted",
                finished_at=now, updated_at=now, claimed_by=None, claimed_until=None)
    ).rowcount
    session.exec(
        update(Container)
        .where(col(Container.tenancy) == name, col(Container.tenancy_deleted_at).is_(None))
        # an idempotency key belonged to the old tenancy: the name's next owner starts clean
        .values(tenancy_deleted_at=now, idempotency_key=None)
    )
    session.exec(delete(ApiToken).where(col(ApiToken.tenancy) == name))
    session.exec(delete(Tenancy).where(col(Tenancy.name) == name))
    session.commit()
    return int(cancelled or 0)


def active_gpus(session: Session, *, tenancy: str) -> int:
    stmt = select(func.coalesce(func.sum(Container.gpus), 0)).where(
        Container.tenancy == tenancy, col(Container.status).in_(ACTIVE_STATUSES)
    )
    return int(session.exec(stmt).one())


def active_gpus_by_tenancy(session: Session) -> dict[str, int]:
    stmt = (
        select(Container.tenancy, func.sum(Container.gpus))
        .where(col(Container.status).in_(ACTIVE_STATUSES))
        .group_by(Container.tenancy)
    )
    return {name: int(total or 0) for name, total in session.exec(stmt).all()}


# --- tokens ----------------------------------------------------------------------


def create_token(
    session: Session, *, tenancy: str | None, name: str | None = None, scope: str | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """A new token for ``tenancy`` (None = admin); returns the row and the secret (shown once)."""
    secret = security.generate_token()
    row = ApiToken(id=security.new_id("tok_"), tenancy=tenancy, token_hash=security.hash_token(secret), name=name,
                   scope=scope, expires_at=expires_at)
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, secret


def ensure_admin_token(session: Session, *, secret: str, name: str = "bootstrap") -> ApiToken:
    """Make sure the configured admin token is accepted (idempotent across restarts)."""
    digest = security.hash_token(secret)
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if row is not None:
        return row
    row = ApiToken(id=security.new_id("tok_"), tenancy=None, token_hash=digest, name=name)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # another replica inserted it
        session.rollback()
        row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).one()
    return row


def count_admin_tokens(session: Session) -> int:
    return int(session.exec(select(func.count()).select_from(ApiToken).where(col(ApiToken.tenancy).is_(None))).one())


def token_by_secret(session: Session, *, secret: str) -> ApiToken | None:
    return session.exec(select(ApiToken).where(ApiToken.token_hash == security.hash_token(secret))).first()


TOUCH_EVERY = timedelta(minutes=1)


def touch_token(session: Session, *, token: ApiToken, now: datetime) -> None:
    """Record the token's use, at most once a minute (no write on most requests)."""
    last = token.last_used_at
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=now.tzinfo)
    if last is not None and now - last < TOUCH_EVERY:
        return
    session.exec(update(ApiToken).where(col(ApiToken.id) == token.id).values(last_used_at=now))
    session.commit()


def list_tokens(session: Session, *, tenancy: str) -> Sequence[ApiToken]:
    return session.exec(select(ApiToken).where(ApiToken.tenancy == tenancy).order_by(ApiToken.created_at)).all()


def delete_token(session: Session, *, tenancy: str, token_id: str) -> bool:
    result = session.exec(delete(ApiToken).where(col(ApiToken.tenancy) == tenancy, col(ApiToken.id) == token_id))
    session.commit()
    return bool(result.rowcount)


# --- containers ------------------------------------------------------------------


def request_hash(*, tenancy: str, data: ContainerCreate) -> str:
    canonical = {
        "tenancy": tenancy,
        "image": data.image_ref,
        "gpus": data.gpus,
        "command": data.command,
        "args": data.args,
        "env": data.env_wire,
        "timeout_seconds": data.timeout_seconds,
        **{k: getattr(data, k) for k in ("cpu", "memory", "shm_size") if getattr(data, k) is not None},
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def _by_idempotency_key(session: Session, *, tenancy: str, key: str) -> Container | None:
    return session.exec(
        select(Container).where(
            Container.tenancy == tenancy,
            Container.idempotency_key == key,
            col(Container.tenancy_deleted_at).is_(None),
        )
    ).first()


def submit_container(
    session: Session, *, tenancy_name: str, data: ContainerCreate, idempotency_key: str | None
) -> tuple[Container, bool]:
    """Commit a new submission (status Queued) after the quota check; returns (row, created).

    With an idempotency key already used for the same request, the existing row comes
    back (created False); used for a different request, Conflict. NotFound when the
    tenancy does not exist.
    """
    digest = request_hash(tenancy=tenancy_name, data=data)
    if idempotency_key is not None:
        existing = _by_idempotency_key(session, tenancy=tenancy_name, key=idempotency_key)
        if existing is not None:
            return _same_request(existing, digest), False
    use_lock = not _is_postgres(session)
    if use_lock:
        _sqlite_quota_lock.acquire()
    try:
        tenancy = get_tenancy(session, name=tenancy_name, lock=True)  # serialises quota checks
        if tenancy is None:
            session.rollback()
            raise errors.NotFound(f"tenancy {tenancy_name!r} not found")
        quota = tenancy.gpu_quota
        in_use = active_gpus(session, tenancy=tenancy.name)
        if in_use + data.gpus > quota:
            session.rollback()
            raise errors.QuotaExceeded(
                f"GPU quota exceeded for tenancy {tenancy.name!r}: requested {data.gpus}, "
                f"{in_use} of {quota} already in use",
                quota=quota,
                in_use=in_use,
                requested=data.gpus,
            )
        cid = security.new_id(nbytes=10)
        row = Container(
            id=cid,
            tenancy=tenancy.name,
            image=data.image_ref,
            gpus=data.gpus,
            command=data.command,
            args=data.args,
            env=data.env_wire,
            cpu=data.cpu,
            memory=data.memory,
            shm_size=data.shm_size,
            timeout_seconds=data.timeout_seconds,
            status=ContainerStatus.QUEUED,
            pod_name=pod_name(cid),
            idempotency_key=idempotency_key,
            request_hash=digest,
        )
        session.add(row)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            if idempotency_key is None:
                raise
            existing = _by_idempotency_key(session, tenancy=tenancy.name, key=idempotency_key)
            if existing is None:
                raise
            return _same_request(existing, digest), False
    finally:
        if use_lock:
            _sqlite_quota_lock.release()
    return row, True


def _same_request(existing: Container, digest: str) -> Container:
    if existing.request_hash != digest:
        raise errors.Conflict("Idempotency-Key was already used for a different request")
    return existing


def get_container(session: Session, *, container_id: str, tenancy: str | None) -> Container | None:
    """The container, or None when it does not exist or is not the caller's (tenancy None = admin)."""
    stmt = select(Container).where(Container.id == container_id)
    if tenancy is not None:  # a tenant never sees a deleted namesake tenancy's history
        stmt = stmt.where(Container.tenancy == tenancy, col(Container.tenancy_deleted_at).is_(None))
    return session.exec(stmt).first()


def list_containers(
    session: Session, *, tenancy: str | None, status: str | None, limit: int, offset: int, history: bool = False
) -> tuple[Sequence[Container], int]:
    """A page of containers; ``history`` includes those of deleted tenancies (admin)."""
    conds: list[Any] = []
    if tenancy is not None:
        conds.append(Container.tenancy == tenancy)
    if not history:
        conds.append(col(Container.tenancy_deleted_at).is_(None))
    if status is not None:
        conds.append(Container.status == status)
    total = int(session.exec(select(func.count()).select_from(Container).where(*conds)).one())
    rows = session.exec(
        select(Container).where(*conds).order_by(col(Container.created_at).desc(), col(Container.id)).offset(offset).limit(limit)
    ).all()
    return rows, total


def cancel_container(session: Session, *, container: Container) -> Container:
    """Mark an active container Cancelled; the worker deletes its pod."""
    now = utcnow()
    session.exec(
        update(Container)
        .where(col(Container.id) == container.id, col(Container.status).in_(ACTIVE_STATUSES))
        .values(status=ContainerStatus.CANCELLED, message="cancelled by request", finished_at=now, updated_at=now)
    )
    session.commit()
    session.refresh(container)
    return container


# --- worker side -----------------------------------------------------------------


def claim_due(session: Session, *, replica: str, claim_seconds: float, limit: int = 16) -> list[Container]:
    """Claim Queued rows whose retry time has come and that no live replica holds."""
    now = utcnow()
    stmt = (
        select(Container)
        .where(
            Container.status == ContainerStatus.QUEUED,
            col(Container.next_attempt_at) <= now,
            or_(col(Container.claimed_until).is_(None), col(Container.claimed_until) < now),
        )
        .order_by(col(Container.next_attempt_at), col(Container.created_at))
        .limit(limit)
    )
    if _is_postgres(session):
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list(session.exec(stmt).all())
    until = now + timedelta(seconds=claim_seconds)
    for row in rows:
        row.claimed_by = replica
        row.claimed_until = until
        session.add(row)
    session.commit()
    for row in rows:
        session.refresh(row)
    return rows


def mark_pod_created(session: Session, *, container_id: str) -> bool:
    """Queued → Pending once the pod exists. False only when the container was cancelled
    meanwhile (its pod must go); the pod watch may already have moved it on, which is fine."""
    now = utcnow()
    result = session.exec(
        update(Container)
        .where(col(Container.id) == container_id, col(Container.status) == ContainerStatus.QUEUED)
        .values(
            status=ContainerStatus.PENDING,
            pod_created=True,
            message=None,
            claimed_by=None,
            claimed_until=None,
            updated_at=now,
        )
    )
    session.commit()
    if result.rowcount:
        return True
    row = session.get(Container, container_id)
    return row is not None and row.status != ContainerStatus.CANCELLED


def reschedule(session: Session, *, container_id: str, delay: float, message: str, count_attempt: bool) -> None:
    now = utcnow()
    values: dict[str, Any] = {
        "next_attempt_at": now + timedelta(seconds=delay),
        "message": message[:2048],
        "claimed_by": None,
        "claimed_until": None,
        "updated_at": now,
    }
    if count_attempt:
        values["attempts"] = Container.attempts + 1
    session.exec(
        update(Container)
        .where(col(Container.id) == container_id, col(Container.status) == ContainerStatus.QUEUED)
        .values(**values)
    )
    session.commit()


def mark_failed(session: Session, *, container_id: str, message: str) -> None:
    now = utcnow()
    session.exec(
        update(Container)
        .where(col(Container.id) == container_id, col(Container.status).in_(ACTIVE_STATUSES))
        .values(status=ContainerStatus.FAILED, message=message[:2048], finished_at=now, updated_at=now,
                claimed_by=None, claimed_until=None)
    )
    session.commit()


def cancelled_with_pods(session: Session, *, limit: int = 32) -> Sequence[Container]:
    return session.exec(
        select(Container)
        .where(Container.status == ContainerStatus.CANCELLED, col(Container.pod_deleted).is_(False))
        .limit(limit)
    ).all()


def mark_pod_deleted(session: Session, *, container_id: str, deleted: bool = True) -> None:
    """Record that the pod of a cancelled container is gone (or, ``deleted=False``, that it
    still exists and must be deleted again)."""
    session.exec(update(Container).where(col(Container.id) == container_id).values(pod_deleted=deleted))
    session.commit()


def apply_pod_report(session: Session, *, container_id: str, report: PodReport) -> bool:
    """Copy a pod's state into its (still active) container; False when nothing changed."""
    row = session.get(Container, container_id)
    if row is None or row.status not in ACTIVE_STATUSES:
        return False
    values: dict[str, Any] = {
        "status": report.status,
        "node_name": report.node_name or row.node_name,
        "message": report.message,
        "started_at": report.started_at or row.started_at,
        "pod_created": True,
    }
    if report.gpus is not None:
        values["gpus"] = report.gpus
    if report.exit_code is not None:
        values["exit_code"] = report.exit_code
    if report.status in (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED):
        values["finished_at"] = report.finished_at or row.finished_at or utcnow()
    if all(getattr(row, k) == v for k, v in values.items()):
        return False
    values["updated_at"] = utcnow()
    values["claimed_by"] = None
    values["claimed_until"] = None
    result = session.exec(
        update(Container)
        .where(col(Container.id) == container_id, col(Container.status).in_(ACTIVE_STATUSES))
        .values(**values)
    )
    session.commit()
    return bool(result.rowcount)


def running_without_pod(
    session: Session, *, present: set[str], before: datetime
) -> Sequence[Container]:
    """Pending/Running containers whose pod was absent from a list taken at ``before``."""
    rows = session.exec(
        select(Container).where(
            col(Container.status).in_((ContainerStatus.PENDING, ContainerStatus.RUNNING)),
            col(Container.updated_at) < before,
        )
    ).all()
    return [r for r in rows if r.id not in present]


def queue_depth(session: Session) -> int:
    return int(
        session.exec(select(func.count()).select_from(Container).where(Container.status == ContainerStatus.QUEUED)).one()
    )
