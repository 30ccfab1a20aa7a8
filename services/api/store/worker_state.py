"""The worker's side of the container table: claiming due submissions and moving a
container through its states as its pod is created, refused, reported on and deleted.

The table is the durable submission queue: the worker claims due ``Queued`` rows with
``FOR UPDATE SKIP LOCKED`` (on PostgreSQL; SQLite has one writer anyway), marking them with
a short claim so that other replicas skip them while it works (``services.api.db.row_claims``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from services.api.db import row_claims
from services.api.domain.models import ACTIVE_STATUSES, Container, ContainerReason, ContainerStatus, utcnow
from services.api.domain.pods import PodReport
from services.api.webhooks import outbox as webhook_outbox


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


def release_claims(session: Session, *, replica: str) -> int:
    """Hand back the Queued rows ``replica`` holds: a replica that stops cleanly (a rolling
    update, a scale-down) leaves them to the others at once, not when the claims run out. A
    crashed replica's claims still run out."""
    result = session.exec(
        update(Container)
        .where(col(Container.claimed_by) == replica, col(Container.status) == ContainerStatus.QUEUED)
        .values(claimed_by=None, claimed_until=None)
    )
    session.commit()
    return int(result.rowcount or 0)


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


def _queued_again(next_pod_name: str, message: str, *, delay: float = 0.0) -> dict[str, Any]:
    """The row of a container queued again for a new pod ``next_pod_name``, made in ``delay`` seconds."""
    now = utcnow()
    return {
        "status": ContainerStatus.QUEUED,
        "pod_name": next_pod_name,
        "pod_created": False,
        "node_name": None,
        "message": message[:2048],
        "next_attempt_at": now + timedelta(seconds=delay),
        "claimed_by": None,
        "claimed_until": None,
        "updated_at": now,
    }


def requeue_refused(
    session: Session, *, container_id: str, pod_name: str, next_pod_name: str, message: str, delay: float = 0.0
) -> bool:
    """Its node refused the pod ``pod_name`` at admission (it never started): queue the container
    again for a new pod ``next_pod_name``, made in ``delay`` seconds. Only one replica wins (the row must still name
    ``pod_name`` and be active, not cancelled); True for that one."""
    result = session.exec(
        update(Container)
        .where(
            col(Container.id) == container_id,
            col(Container.pod_name) == pod_name,
            col(Container.status).in_((ContainerStatus.QUEUED, ContainerStatus.PENDING)),
        )
        .values(**_queued_again(next_pod_name, message, delay=delay))
    )
    session.commit()
    return bool(result.rowcount)


def requeue_preempted(session: Session, *, container_id: str, pod_name: str, next_pod_name: str, message: str) -> bool:
    """The queue preempted the pod ``pod_name`` of a container that asked to be put back
    (``restart_on_preemption``): queue it again for its next run, under the same id, in a new pod
    ``next_pod_name``; its reason stays ``Preempted`` until that run starts. Only one replica
    wins (the row must still name ``pod_name`` and be active); True for that one, whose
    transaction also queues the ``container.preempted`` event."""
    result = session.exec(
        update(Container)
        .where(
            col(Container.id) == container_id,
            col(Container.pod_name) == pod_name,
            col(Container.status).in_(ACTIVE_STATUSES),
        )
        .values(
            **_queued_again(next_pod_name, message),
            started_at=None,
            finished_at=None,
            exit_code=None,
            reason=ContainerReason.PREEMPTED,
            preemptions=Container.preemptions + 1,
            attempts=0,
        )
    )
    if result.rowcount:
        webhook_outbox.on_status_change(session, container_id=container_id, before=None)
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


def mark_failed(
    session: Session, *, container_id: str, message: str, pod_name: str | None = None, reason: str | None = None
) -> None:
    """Fail an active container (``pod_name``: only while that pod is its current attempt);
    ``reason``: why the platform ended it (``Preempted``)."""
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
            reason=reason,
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
        values["reason"] = report.reason
    elif report.status == ContainerStatus.RUNNING:
        values["reason"] = None  # a new run started: an earlier run's preemption no longer says how it ends
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


def oldest_queued_age(session: Session, now: datetime | None = None) -> float:
    """Seconds the longest-waiting ``Queued`` container has waited for its pod (0: none waits)."""
    oldest = session.exec(
        select(func.min(Container.created_at)).where(Container.status == ContainerStatus.QUEUED)
    ).one()
    if oldest is None:
        return 0.0
    if oldest.tzinfo is None:  # SQLite gives the stored UTC time back without its zone
        oldest = oldest.replace(tzinfo=UTC)
    return max(0.0, ((now or utcnow()) - oldest).total_seconds())
