"""Container submission and admission: a new row goes in only when its tenancy has room
for its GPUs, decided in one ``INSERT ... SELECT`` statement (with its audit event), plus
the idempotency key's lookup and the refusals (no tenancy, quota, GPU-hour budget).

The container table is also the durable submission queue: a row is committed (status
``Queued``) before the 202 goes out; the worker takes it from there (``worker_state``).
"""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import JSON, Engine, bindparam, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from services.api import errors
from services.api.domain.models import (
    AuditAction,
    AuditEvent,
    Container,
    ContainerCreate,
    ContainerStatus,
    Tenancy,
    utcnow,
)
from services.api.domain.pods import pod_name
from services.api.security import bearer
from services.api.store import audit
from services.api.store.audit import Actor
from services.api.store.dialect import is_postgres
from services.api.store.tenancies import get_tenancy
from services.api.usage import budget as usage_budget

if TYPE_CHECKING:
    from services.api.db.admission_pool import AdmissionPool


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
        **({"interruptible": True} if data.interruptible else {}),
        **({"restart_on_preemption": True} if data.restart_on_preemption else {}),
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
    autocommit: :mod:`services.api.db.admission_pool`), so a submission takes no worker
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
        stmt, params = admission_on_postgres(values, actor)
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
    cid = bearer.new_id(nbytes=10)
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
        interruptible=data.interruptible,
        restart_on_preemption=data.restart_on_preemption,
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


def admission_on_postgres(values: dict[str, Any], actor: Actor | None) -> tuple[Any, dict[str, Any]]:
    """The one statement a submission commits on PostgreSQL's fast path (no GPU-hour budget)
    and its parameters: what :func:`submit_container_async` runs, and what
    ``benchmarks.api`` gives ``pgbench`` as the database's own ceiling."""
    return _admission(True, False, values, actor)


def new_submission_values(tenancy_name: str, data: ContainerCreate) -> dict[str, Any]:
    """A new submission's row, as :func:`submit_container_async` builds it (no idempotency key)."""
    return _submission(tenancy_name, data, None)[1]


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
    postgres = is_postgres(session)
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
