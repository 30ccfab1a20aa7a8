"""Queries and writes, one keyword-only function each; callers own the session.

The container table is also the durable submission queue: a row is committed
(status ``Queued``) before the 202 goes out, and the worker claims due rows with
``FOR UPDATE SKIP LOCKED`` (on PostgreSQL; SQLite has one writer anyway), marking
them with a short claim so that other replicas skip them while it works.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import JSON, Engine, and_, bindparam, func, insert, literal, or_, tuple_, update
from sqlalchemy.exc import IntegrityError, InvalidRequestError
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session, col, delete, select

from services.api import audit, errors, revocations, row_claims, security, token_cache
from services.api.audit import Actor
from services.api.models import (
    ACTIVE_STATUSES,
    CONTAINER_COUNT_COLUMNS,
    ApiToken,
    AuditAction,
    AuditEvent,
    Container,
    ContainerCreate,
    ContainerStatus,
    Tenancy,
    TenancyCreate,
    TenancyUpdate,
    quota_problem,
    utcnow,
)
from services.api.pods import PodReport, pod_name
from services.api.usage import budget as usage_budget, records as usage_records
from services.api.webhooks import outbox as webhook_outbox, store as webhook_store

if TYPE_CHECKING:
    from services.api.admission_pool import AdmissionPool

log = logging.getLogger(__name__)


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
    )
    if problem:
        raise errors.Invalid(problem)
    name = tenancy.name
    for field in ("gpu_quota", "pod_quota", "allow_internet", "gpu_hours_per_month"):
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


# --- tokens ----------------------------------------------------------------------


def create_token(
    session: Session,
    *,
    tenancy: str | None,
    name: str | None = None,
    scope: str | None = None,
    expires_at: datetime | None = None,
    actor: Actor | None = None,
) -> tuple[ApiToken, str]:
    """A new token for ``tenancy`` (None = admin); returns the row and the secret (shown
    once, never stored: the row holds its digest). ``actor``, the token minting it, is
    recorded as ``created_by`` and in the tenancy's audit trail, in the same commit."""
    secret = security.generate_token()
    row = ApiToken(
        id=security.new_id("tok_"),
        tenancy=tenancy,
        token_hash=security.hash_token(secret),
        name=name,
        scope=scope,
        expires_at=expires_at,
        created_by=actor.token_id if actor else None,
    )
    session.add(row)
    if tenancy is not None:
        detail = f"name {name!r}, scope {scope or 'admin'}" + (
            f", expires {expires_at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}" if expires_at else ""
        )
        audit.record(session, actor, tenancy=tenancy, action=AuditAction.TOKEN_CREATE, target=row.id, detail=detail)
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
    return token_by_digest(session, digest=security.hash_token(secret))


def token_by_digest(session: Session, *, digest: str) -> ApiToken | None:
    """The token whose SHA-256 digest this is (an index hit: ``token_hash`` is unique)."""
    return session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()


TOUCH_EVERY = timedelta(minutes=1)


def touch_due(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether the token's use should be recorded now (at most once a minute)."""
    last = last_used_at
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=now.tzinfo)
    return last is None or now - last >= TOUCH_EVERY


def touch_token(session: Session, *, token_id: str, now: datetime) -> None:
    """Record the token's use (callers check :func:`touch_due` first: no write on most requests)."""
    session.exec(update(ApiToken).where(col(ApiToken.id) == token_id).values(last_used_at=now))
    session.commit()


def list_tokens(session: Session, *, tenancy: str) -> Sequence[ApiToken]:
    return session.exec(select(ApiToken).where(ApiToken.tenancy == tenancy).order_by(col(ApiToken.created_at))).all()


def count_tokens(session: Session, *, tenancy: str) -> int:
    return int(session.exec(select(func.count()).select_from(ApiToken).where(ApiToken.tenancy == tenancy)).one())


def delete_token(session: Session, *, tenancy: str, token_id: str, actor: Actor | None = None) -> bool:
    """Revoke one of the tenancy's tokens (False: no such token in that tenancy). When this
    returns, no replica accepts it any more: this process forgets it after the commit and
    every other replica has acknowledged the revocation (``services.api.revocations``)."""
    name = session.exec(
        select(ApiToken.name).where(col(ApiToken.tenancy) == tenancy, col(ApiToken.id) == token_id)
    ).first()
    result = session.exec(delete(ApiToken).where(col(ApiToken.tenancy) == tenancy, col(ApiToken.id) == token_id))
    epoch = None
    if result.rowcount:
        epoch = revocations.announce(session, token_id=token_id)
        audit.record(
            session,
            actor,
            tenancy=tenancy,
            action=AuditAction.TOKEN_REVOKE,
            target=token_id,
            detail=f"name {name!r}" if name else None,
        )
    session.commit()
    token_cache.revoked(token_id=token_id)
    revocations.wait_heard(session.get_bind(), epoch)  # type: ignore[arg-type]
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
        **({"volumes": data.volumes_wire} if data.volumes else {}),
        **({"ports": data.ports_wire} if data.ports else {}),
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def _by_idempotency_key(session: Session, *, tenancy: str, key: str) -> Any:
    """The tenancy's container submitted with ``key`` (a row), or None: :data:`_BY_KEY`."""
    return session.execute(_BY_KEY, {"tenancy": tenancy, "key": key}).first()


def submit_container(
    session: Session,
    *,
    tenancy_name: str,
    data: ContainerCreate,
    idempotency_key: str | None,
    actor: Actor | None = None,
) -> tuple[Container | SimpleNamespace, bool]:
    """Commit a new submission (status Queued) after admission; returns (row, created).

    A new row comes back as the column values it was inserted with (attributes of a
    ``SimpleNamespace``: building the ORM object costs more than the insert). With an
    idempotency key already used for the same request, the existing row comes back
    (created False); used for a different request, Conflict. NotFound when the tenancy
    does not exist; QuotaExceeded when it has no room. :func:`submit_container_async`
    is the same on PostgreSQL's async driver. A new row's ``container.submit`` event for
    ``actor`` is written with it (:func:`admit_container`).
    """
    digest, values = _submission(tenancy_name, data, idempotency_key)
    if idempotency_key is not None:  # an index hit (uq_container_idempotency)
        existing = _by_idempotency_key(session, tenancy=tenancy_name, key=idempotency_key)
        if existing is not None:
            return _same_request(existing, digest), False
    if session.in_transaction():  # the admission takes a connection of its own, in autocommit
        session.rollback()
    try:
        if admit_container(session, values=values, actor=actor):
            return SimpleNamespace(**values), True
    except IntegrityError as err:
        return _key_taken_meanwhile(session, tenancy_name, idempotency_key, digest, err)
    return _not_admitted(session, tenancy_name, data.gpus, values, idempotency_key, digest, actor)


async def submit_container_async(
    pool: AdmissionPool,
    engine: Engine,
    *,
    tenancy_name: str,
    data: ContainerCreate,
    idempotency_key: str | None,
    actor: Actor | None = None,
) -> tuple[Container | SimpleNamespace | Any, bool]:
    """:func:`submit_container` with its common case on the event loop: the idempotency
    lookup and the admission statement run on ``pool`` (psycopg's own asyncio pool, in
    autocommit: :mod:`services.api.admission_pool`), so a submission takes no worker
    thread. When the one-statement admission inserts nothing (no room, no such tenancy, a
    GPU-hour budget to check) the rest is worked out on a worker thread with a session on
    ``engine``."""
    digest, values = _submission(tenancy_name, data, idempotency_key)
    by_key = {"tenancy": tenancy_name, "key": idempotency_key}
    if idempotency_key is not None:
        existing = await pool.first(_BY_KEY, by_key)
        if existing is not None:
            return _same_request(existing, digest), False
    try:
        stmt, params = _admission(True, False, values, actor)
        admitted = await pool.first(stmt, params) is not None
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = await pool.first(_BY_KEY, by_key)
        if existing is None:
            raise
        return _same_request(existing, digest), False
    if admitted:
        return SimpleNamespace(**values), True

    def rest() -> tuple[Container | SimpleNamespace, bool]:
        with Session(engine, expire_on_commit=False) as session:
            return _not_admitted(session, tenancy_name, data.gpus, values, idempotency_key, digest, actor)

    return await anyio.to_thread.run_sync(rest)


_CONTAINERS = Container.__table__  # type: ignore[attr-defined]
# the idempotency lookup as a Core statement built once (an index hit on uq_container_idempotency)
_BY_KEY = _CONTAINERS.select().where(
    _CONTAINERS.c.tenancy == bindparam("tenancy"),
    _CONTAINERS.c.idempotency_key == bindparam("key"),
    _CONTAINERS.c.tenancy_deleted_at.is_(None),
)


def _submission(tenancy_name: str, data: ContainerCreate, idempotency_key: str | None) -> tuple[str, dict[str, Any]]:
    """The request's digest and the new row's column values."""
    digest = request_hash(tenancy=tenancy_name, data=data)
    cid = security.new_id(nbytes=10)
    values = _new_container_values(
        id=cid,
        tenancy=tenancy_name,
        image=data.image_ref,
        gpus=data.gpus,
        command=data.command,
        args=data.args,
        env=data.env_wire,
        cpu=data.cpu,
        memory=data.memory,
        shm_size=data.shm_size,
        volumes=data.volumes_wire,
        ports=data.ports_wire,
        timeout_seconds=data.timeout_seconds,
        status=ContainerStatus.QUEUED.value,
        pod_name=pod_name(cid),
        idempotency_key=idempotency_key,
        request_hash=digest,
    )
    return digest, values


def _not_admitted(
    session: Session,
    tenancy_name: str,
    gpus: int,
    values: dict[str, Any],
    idempotency_key: str | None,
    digest: str,
    actor: Actor | None = None,
) -> tuple[Container | SimpleNamespace, bool]:
    """After the fast admission inserted nothing: a tenancy with a GPU-hour budget is
    admitted once its budget is checked (403 when spent); otherwise the refusal says why."""
    try:
        tenancy = get_tenancy(session, name=tenancy_name)
        if tenancy is not None and tenancy.gpu_hours_per_month is not None:
            usage_budget.check(session, tenancy=tenancy)  # 403 once the month's budget is spent
            session.rollback()
            if admit_container(session, values=values, budgeted=True, actor=actor):
                return SimpleNamespace(**values), True
    except IntegrityError as err:
        return _key_taken_meanwhile(session, tenancy_name, idempotency_key, digest, err)
    raise _refusal(session, tenancy=tenancy_name, requested=gpus)


def _key_taken_meanwhile(
    session: Session, tenancy_name: str, idempotency_key: str | None, digest: str, err: IntegrityError
) -> tuple[Any, bool]:
    """The insert met the idempotency key's unique index: a concurrent request with the
    same key got in first; its row is the answer (or Conflict for a different request)."""
    existing = (
        None if idempotency_key is None else _by_idempotency_key(session, tenancy=tenancy_name, key=idempotency_key)
    )
    if existing is None:
        raise err
    return _same_request(existing, digest), False


def _new_container_values(**given: Any) -> dict[str, Any]:
    """Every column of a new container row: ``given``, else the model's defaults."""
    now = utcnow()
    values: dict[str, Any] = {}
    for name, field in Container.model_fields.items():
        if name in given:
            values[name] = given[name]
        elif field.default_factory is not None:
            values[name] = now if field.default_factory is utcnow else field.default_factory()  # type: ignore[call-arg]
        else:
            values[name] = field.default
    return values


def _admission_statement(*, lock: bool, budgeted: bool, audited: bool = False) -> Any:
    """``INSERT INTO container (...) SELECT :values FROM tenancy WHERE name = :tenancy AND
    gpus_in_use + :gpus <= gpu_quota [AND gpu_hours_per_month IS NULL] [FOR UPDATE]
    RETURNING id``, built once. The fast path admits only tenancies without a GPU-hour
    budget; a budgeted one is admitted (``budgeted``) after its budget was checked.

    ``audited`` (PostgreSQL): the same insert as a data-modifying CTE whose returned row
    feeds the ``container.submit`` audit event — ``WITH admitted AS (INSERT ... RETURNING
    id, tenancy) INSERT INTO audit_event ... SELECT ... FROM admitted RETURNING target`` —
    still one statement and one round trip; the event exists exactly when the container does.
    """
    table = Container.__table__  # type: ignore[attr-defined]
    columns = []
    for c in table.columns:
        # None as SQL NULL: a JSON column would otherwise store the JSON value null
        kind = JSON(none_as_null=True) if isinstance(c.type, JSON) else c.type
        columns.append(bindparam(f"v_{c.name}", type_=kind).label(c.name))
    source = select(*columns).where(
        col(Tenancy.name) == bindparam("v_tenancy"),
        col(Tenancy.gpus_in_use) + bindparam("v_gpus") <= col(Tenancy.gpu_quota),
    )
    if not budgeted:
        source = source.where(col(Tenancy.gpu_hours_per_month).is_(None))
    if lock:
        source = source.with_for_update()
    admission = insert(table).from_select([c.name for c in table.columns], source)
    if not audited:
        return admission.returning(table.c.id)
    admitted = admission.returning(table.c.id, table.c.tenancy).cte("admitted")
    event = audit.submission_insert(admitted)
    return event.returning(event.table.c.target)


_ADMIT = {
    (lock, budgeted): _admission_statement(lock=lock, budgeted=budgeted)
    for lock in (True, False)
    for budgeted in (True, False)
}
# PostgreSQL's admission with its audit event, in one statement
_ADMIT_AUDITED = {
    budgeted: _admission_statement(lock=True, budgeted=budgeted, audited=True) for budgeted in (True, False)
}
_AUDIT_INSERT = insert(AuditEvent.__table__)  # type: ignore[attr-defined]


def _admission(postgres: bool, budgeted: bool, values: dict[str, Any], actor: Actor | None) -> tuple[Any, dict]:
    """The admission statement to run and its parameters (the audit event's too on PostgreSQL)."""
    params = _admit_params(values)
    if actor is not None and postgres:
        return _ADMIT_AUDITED[budgeted], {**params, **audit.submission_params(actor, at=values["created_at"])}
    return _ADMIT[(postgres, budgeted)], params


def admit_container(
    session: Session, *, values: dict[str, Any], budgeted: bool = False, actor: Actor | None = None
) -> bool:
    """Insert the new row ``values`` if its tenancy exists and has room for it, in one
    statement (:func:`_admission_statement`) run in autocommit: one round trip, and the
    row is durably committed when it returns (the commit's flush happens inside the
    database, so a lock it takes is held for the statement and that flush only, not
    for a second round trip from a busy client).

    ``tenancy.gpus_in_use`` is the GPUs of the tenancy's active containers, kept exact
    by the triggers of migration 0006 (which also count this insert). On PostgreSQL
    ``FOR UPDATE`` locks the tenancy row from this statement to the commit only (a
    concurrent admission waits, then re-checks the condition against the committed
    counter: READ COMMITTED's re-evaluation of locked rows); SQLite runs one writing
    statement at a time. Returns False when nothing was inserted (no such tenancy or
    no room: :func:`_refusal` says which). A tenancy with a monthly GPU-hour budget is
    admitted only with ``budgeted`` (after :func:`services.api.usage.budget.check`), so the
    common case stays one statement.

    With an ``actor`` the ``container.submit`` audit event goes in with the row: in the
    same statement on PostgreSQL, in the same transaction (one commit) on SQLite.
    """
    postgres = _is_postgres(session)
    stmt, params = _admission(postgres, budgeted, values, actor)
    bind = session.get_bind()
    assert isinstance(bind, Engine), "the API's sessions are bound to its engine"
    if actor is not None and not postgres:
        with bind.connect() as conn, conn.begin():
            if conn.execute(stmt, params).first() is None:
                return False
            conn.execute(
                _AUDIT_INSERT,
                audit.values(
                    actor,
                    tenancy=values["tenancy"],
                    at=values["created_at"],
                    action=AuditAction.CONTAINER_SUBMIT,
                    target=values["id"],
                ),
            )
            return True
    with bind.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # RETURNING says whether a row went in (psycopg reports no rowcount for INSERT ... SELECT)
        return conn.execute(stmt, params).first() is not None


def _admit_params(values: dict[str, Any]) -> dict[str, Any]:
    return {f"v_{k}": v for k, v in values.items()}


def _refusal(session: Session, *, tenancy: str, requested: int) -> errors.ApiError:
    found = session.exec(select(Tenancy.gpu_quota, Tenancy.gpus_in_use).where(Tenancy.name == tenancy)).first()
    session.rollback()
    if found is None:
        return errors.NotFound(f"tenancy {tenancy!r} not found")
    quota, in_use = found
    return errors.QuotaExceeded(
        f"GPU quota exceeded for tenancy {tenancy!r}: requested {requested}, {in_use} of {quota} already in use",
        quota=quota,
        in_use=in_use,
        requested=requested,
    )


def _same_request(existing: Any, digest: str) -> Any:
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
        if not _is_postgres(session) and created.tzinfo is not None:  # SQLite keeps naive UTC
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


# --- worker side -----------------------------------------------------------------


def claim_due(session: Session, *, replica: str, claim_seconds: float, limit: int = 16) -> list[Container]:
    """Claim Queued rows whose retry time has come and that no live replica holds."""
    return row_claims.claim_due(
        session,
        Container,
        Container.status == ContainerStatus.QUEUED,
        order_by=(col(Container.next_attempt_at), col(Container.created_at)),
        claim_seconds=claim_seconds,
        limit=limit,
        claimed_by=replica,
    )


def mark_pod_created(session: Session, *, container_id: str, pod_name: str | None = None) -> bool:
    """Queued → Pending once the pod (``pod_name``: the attempt's) exists. False only when the
    container was cancelled meanwhile (its pod must go); the pod watch may already have moved
    it on, or queued a later attempt, which is fine."""
    now = utcnow()
    where = [col(Container.id) == container_id, col(Container.status) == ContainerStatus.QUEUED]
    if pod_name is not None:
        where.append(col(Container.pod_name) == pod_name)
    result = session.exec(
        update(Container)
        .where(*where)
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


def requeue_refused(
    session: Session, *, container_id: str, pod_name: str, next_pod_name: str, message: str, delay: float = 0.0
) -> bool:
    """Its node refused the pod ``pod_name`` at admission (it never started): queue the container
    again for a new pod ``next_pod_name``, made in ``delay`` seconds. Only one replica wins (the row must still name
    ``pod_name`` and be active, not cancelled); True for that one."""
    now = utcnow()
    result = session.exec(
        update(Container)
        .where(
            col(Container.id) == container_id,
            col(Container.pod_name) == pod_name,
            col(Container.status).in_((ContainerStatus.QUEUED, ContainerStatus.PENDING)),
        )
        .values(
            status=ContainerStatus.QUEUED,
            pod_name=next_pod_name,
            pod_created=False,
            node_name=None,
            message=message[:2048],
            next_attempt_at=now + timedelta(seconds=delay),
            claimed_by=None,
            claimed_until=None,
            updated_at=now,
        )
    )
    session.commit()
    return bool(result.rowcount)


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


def mark_failed(session: Session, *, container_id: str, message: str, pod_name: str | None = None) -> None:
    """Fail an active container (``pod_name``: only while that pod is its current attempt)."""
    now = utcnow()
    where = [col(Container.id) == container_id, col(Container.status).in_(ACTIVE_STATUSES)]
    if pod_name is not None:
        where.append(col(Container.pod_name) == pod_name)
    result = session.exec(
        update(Container)
        .where(*where)
        .values(
            status=ContainerStatus.FAILED,
            message=message[:2048],
            finished_at=now,
            updated_at=now,
            claimed_by=None,
            claimed_until=None,
        )
    )
    if result.rowcount:
        webhook_outbox.on_status_change(session, container_id=container_id, before=None)
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


def apply_pod_report(session: Session, *, container_id: str, report: PodReport, pod_name: str | None = None) -> bool:
    """Copy a pod's state into its (still active) container; False when nothing changed.
    ``pod_name``: the pod reporting, whose report counts only while it is the container's
    current attempt (another replica may have just queued the next one)."""
    row = session.get(Container, container_id)
    if row is None or row.status not in ACTIVE_STATUSES or (pod_name is not None and row.pod_name != pod_name):
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
    before = row.status
    where = [col(Container.id) == container_id, col(Container.status).in_(ACTIVE_STATUSES)]
    if pod_name is not None:
        where.append(col(Container.pod_name) == pod_name)
    result = session.exec(update(Container).where(*where).values(**values))
    if result.rowcount and report.status != before:
        webhook_outbox.on_status_change(session, container_id=container_id, before=before)
    session.commit()
    return bool(result.rowcount)


def running_without_pod(session: Session, *, present: set[str], before: datetime) -> Sequence[Container]:
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
        session.exec(
            select(func.count()).select_from(Container).where(Container.status == ContainerStatus.QUEUED)
        ).one()
    )
