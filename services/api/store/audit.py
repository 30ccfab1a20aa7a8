"""A tenancy's audit trail: who changed what, when, from which address (``GET /v1/audit``).

Each change a tenant — or an operator acting in a tenancy — makes is one ``audit_event``
row (migration 0010): the token (its id, and its name as it was then), the action
(:class:`~services.api.domain.models.AuditAction`), the target (a container or token id, a
secret's *name*, a registry server, a webhook id), the client's address and a few fixed
words of detail. A row never holds a secret value: the functions here take ids and names
only, never a request body, and the detail strings are written by this code, not copied
from input — save an exec's command line, recorded as typed (:func:`exec_started`).

A row is written with the change it records, never in a commit of its own: a
submission's inside the admission statement itself (``store.admission.admit_container``: one
statement on PostgreSQL, one transaction on SQLite), a cancel's and a token's in the
commit of the change; changes Kubernetes keeps (secrets, registry credentials, webhook
signing secrets) once Kubernetes has accepted them.

The trail is read newest first, one tenancy at a time, by keyset pages (``at``, ``id``:
``services.api.routes.pagination``). ``audit_retention_days`` bounds it: the worker's retention
pass deletes older rows (:func:`prune`). Rows of a deleted tenancy are hidden from a new
tenancy of the same name until retention removes them.

Hooks for changes that other work adds — :func:`exec_started`, :func:`volume_changed`,
:func:`endpoint_changed` — record those with the same guarantees; the caller commits.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Engine, bindparam, delete, insert, literal, select, tuple_, update
from sqlmodel import Session, col

from services.api.domain.models import AuditAction, AuditEvent, utcnow
from services.api.security import bearer

_TABLE = AuditEvent.__table__  # type: ignore[attr-defined]

Change = Literal["create", "update", "delete"]


@dataclass(frozen=True)
class Actor:
    """Who does it: the request's token and the client's address."""

    token_id: str | None
    token_name: str | None
    client: str | None


def new_id() -> str:
    return bearer.new_id("ev_", nbytes=10)


def _clip(value: str | None, n: int) -> str | None:
    return None if value is None else value[:n]


def values(
    actor: Actor,
    *,
    tenancy: str,
    action: AuditAction,
    target: str | None = None,
    detail: str | None = None,
    at: datetime | None = None,
) -> dict[str, Any]:
    """The column values of one event."""
    return {
        "id": new_id(),
        "tenancy": tenancy,
        "at": at or utcnow(),
        "action": action.value,
        "target": _clip(target, 255),
        "token_id": actor.token_id,
        "token_name": _clip(actor.token_name, 128),
        "client": _clip(actor.client, 64),
        "detail": _clip(detail, 256),
        "tenancy_deleted_at": None,
    }


def record(
    session: Session,
    actor: Actor | None,
    *,
    tenancy: str,
    action: AuditAction,
    target: str | None = None,
    detail: str | None = None,
) -> None:
    """Add an event to the session's transaction (the caller commits it with its change).
    No actor (an internal caller, a test driving ``store`` directly): nothing is recorded."""
    if actor is None:
        return
    session.execute(
        insert(_TABLE).values(**values(actor, tenancy=tenancy, action=action, target=target, detail=detail))
    )


def record_now(
    session: Session,
    actor: Actor | None,
    *,
    tenancy: str,
    action: AuditAction,
    target: str | None = None,
    detail: str | None = None,
) -> None:
    """Record and commit an event of a change kept outside the database (a Kubernetes
    Secret), once that change was accepted."""
    record(session, actor, tenancy=tenancy, action=action, target=target, detail=detail)
    session.commit()


# --- the submission's event, written by the admission statement (store.admission) ------

#: the event columns of a submission, bound as ``a_<column>`` (target and tenancy come
#: from the admitted row)
SUBMISSION_PARAMS = ("id", "at", "action", "token_id", "token_name", "client")


def submission_params(actor: Actor, *, at: datetime) -> dict[str, Any]:
    row = values(actor, tenancy="", action=AuditAction.CONTAINER_SUBMIT, at=at)
    return {f"a_{k}": row[k] for k in SUBMISSION_PARAMS}


def submission_insert(admitted: Any) -> Any:
    """``INSERT INTO audit_event ... SELECT ... FROM admitted`` where ``admitted`` is the
    admission's ``INSERT ... RETURNING id, tenancy`` (a CTE on PostgreSQL): the event
    exists exactly when the container does."""
    columns = ["id", "tenancy", "at", "action", "target", "token_id", "token_name", "client"]
    source = select(
        bindparam("a_id", type_=_TABLE.c.id.type),
        admitted.c.tenancy,
        bindparam("a_at", type_=_TABLE.c.at.type),
        bindparam("a_action", type_=_TABLE.c.action.type),
        admitted.c.id,
        bindparam("a_token_id", type_=_TABLE.c.token_id.type),
        bindparam("a_token_name", type_=_TABLE.c.token_name.type),
        bindparam("a_client", type_=_TABLE.c.client.type),
    ).select_from(admitted)
    return insert(_TABLE).from_select(columns, source)


# --- hooks for changes other work adds ---------------------------------------------------


DETAIL_MAX = 256  # the column's width


def exec_started(
    session: Session, actor: Actor | None, *, tenancy: str, container_id: str, command: Sequence[str], tty: bool
) -> None:
    """A command was started in a running container: its command line is recorded as the
    tenant typed it, cut to the column's width (as Kubernetes' own audit log keeps an exec's
    ``command`` parameters); the tenant guide says to pass values as secrets, never on it."""
    line = ("tty: " if tty else "") + shlex.join(command)
    if len(line) > DETAIL_MAX:
        line = line[: DETAIL_MAX - 1] + "\u2026"
    record(session, actor, tenancy=tenancy, action=AuditAction.CONTAINER_EXEC, target=container_id, detail=line)


def volume_changed(session: Session, actor: Actor | None, *, tenancy: str, volume: str, change: Change) -> None:
    """A volume of the tenancy was created, changed or deleted (``volume`` is its name or id)."""
    action = {
        "create": AuditAction.VOLUME_CREATE,
        "update": AuditAction.VOLUME_UPDATE,
        "delete": AuditAction.VOLUME_DELETE,
    }[change]
    record(session, actor, tenancy=tenancy, action=action, target=volume)


def endpoint_changed(session: Session, actor: Actor | None, *, tenancy: str, endpoint: str, change: Change) -> None:
    """An endpoint (a container's exposed service) was created, changed or deleted."""
    action = {
        "create": AuditAction.ENDPOINT_CREATE,
        "update": AuditAction.ENDPOINT_UPDATE,
        "delete": AuditAction.ENDPOINT_DELETE,
    }[change]
    record(session, actor, tenancy=tenancy, action=action, target=endpoint)


# --- reading, forgetting, pruning ----------------------------------------------------------


def page(
    session: Session, *, tenancy: str, action: AuditAction | None, limit: int, after: tuple[datetime, str] | None
) -> tuple[Sequence[Any], tuple[datetime, str] | None]:
    """A page of the tenancy's events, newest first (``at``, then ``id``, both descending),
    starting after the key ``after``: an index range scan of ``ix_audit_event_tenancy_at``.
    Returns the rows and the key of the last one when more may follow."""
    conds: list[Any] = [_TABLE.c.tenancy == tenancy, _TABLE.c.tenancy_deleted_at.is_(None)]
    if action is not None:
        conds.append(_TABLE.c.action == action.value)
    if after is not None:
        at, last_id = after
        if session.get_bind().dialect.name != "postgresql" and at.tzinfo is not None:  # SQLite keeps naive UTC
            at = at.astimezone(UTC).replace(tzinfo=None)
        conds.append(tuple_(_TABLE.c.at, _TABLE.c.id) < tuple_(literal(at), literal(last_id)))
    stmt = select(*_TABLE.columns).where(*conds).order_by(_TABLE.c.at.desc(), _TABLE.c.id.desc()).limit(limit + 1)
    rows = list(session.execute(stmt).all())
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1].at, rows[-1].id) if more and rows else None)


def forget_tenancy(session: Session, *, tenancy: str, when: datetime) -> None:
    """Hide a deleted tenancy's events from a new tenancy of the same name (the caller commits)."""
    session.execute(
        update(_TABLE)
        .where(_TABLE.c.tenancy == tenancy, _TABLE.c.tenancy_deleted_at.is_(None))
        .values(tenancy_deleted_at=when)
    )


def prune(engine: Engine, *, days: float, batch: int = 5000) -> int:
    """Delete events older than ``days``, ``batch`` rows a transaction; returns how many."""
    cutoff = utcnow() - timedelta(days=days)
    removed = 0
    while True:
        with Session(engine) as session:
            ids = session.execute(select(_TABLE.c.id).where(_TABLE.c.at < cutoff).limit(batch)).scalars().all()
            if ids:
                session.execute(delete(_TABLE).where(col(AuditEvent.id).in_(ids)))
                session.commit()
        removed += len(ids)
        if len(ids) < batch:
            return removed
