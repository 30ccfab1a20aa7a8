"""The outbox: a container's status change becomes webhook deliveries in the same transaction.

The writes that change a container's status (the pod watcher's report, a cancellation,
the worker failing a submission) call ``on_status_change`` after their UPDATE and before
their COMMIT, so the event and the change are committed together or not at all (the
"transactional outbox" pattern): a crash can lose neither, and the dispatcher sends
what is committed, at least once.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, select

from services.api.domain.models import Container, ContainerReason, ContainerStatus, utcnow
from services.api.security import bearer
from services.api.webhooks.models import EVENT_OF_STATUS, PREEMPTED_EVENT, Webhook, WebhookDelivery


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value.utcoffset() in (None, timedelta(0)) else value.isoformat()


def container_view(row: Container) -> dict[str, Any]:
    """What an event says of the container (no environment, no worker bookkeeping)."""
    return {
        "id": row.id,
        "status": row.status,
        "image": row.image,
        "gpus": row.gpus,
        "exit_code": row.exit_code,
        "reason": row.reason,
        "interruptible": row.interruptible,
        "attempt": row.preemptions + 1,
        "node_name": row.node_name,
        "message": row.message,
        "created_at": _iso(row.created_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
    }


def event_body(event_id: str, event_type: str, tenancy: str, container: dict[str, Any], now: datetime) -> str:
    return json.dumps(
        {
            "id": event_id,
            "type": event_type,
            "created_at": _iso(now),
            "tenancy": tenancy,
            "data": {"container": container},
        },
        separators=(",", ":"),
    )


def on_status_change(session: Session, *, container_id: str, before: str | None) -> int:
    """Queue the events of ``container_id``'s new status (read in this transaction) for every
    endpoint of its tenancy that wants them; ``before`` is the status it had (None: some
    active status). The caller commits. Returns how many deliveries were queued.

    A container seen finished without having been seen Running (a short run between
    two pod reports) also announces ``container.running`` first, when it did start. A container
    the queue preempted announces ``container.preempted`` ahead of its ``container.failed``, or
    alone when it went back in the queue (``restart_on_preemption``)."""
    row = session.exec(
        select(Container).where(Container.id == container_id).execution_options(populate_existing=True)
    ).first()
    if row is None or row.status == before:
        return 0
    types: list[str] = []
    finished = row.status in (ContainerStatus.SUCCEEDED, ContainerStatus.FAILED)
    if finished and before in (ContainerStatus.QUEUED, ContainerStatus.PENDING) and row.started_at is not None:
        types.append(EVENT_OF_STATUS[ContainerStatus.RUNNING])
    if row.reason == ContainerReason.PREEMPTED and row.status in (ContainerStatus.FAILED, ContainerStatus.QUEUED):
        types.append(PREEMPTED_EVENT)  # ended by the queue, or put back in it (restart_on_preemption)
    if row.status in EVENT_OF_STATUS:
        types.append(EVENT_OF_STATUS[ContainerStatus(row.status)])
    if not types:
        return 0
    hooks = session.exec(select(Webhook).where(Webhook.tenancy == row.tenancy)).all()
    if not hooks:
        return 0
    now = utcnow()
    view = container_view(row)
    queued = 0
    for event_type in types:
        event_id = bearer.new_id("evt_", nbytes=12)
        body = event_body(event_id, event_type, row.tenancy, view, now)
        for hook in hooks:
            if event_type in hook.events:
                session.add(
                    WebhookDelivery(
                        id=bearer.new_id("whd_", nbytes=12),
                        webhook_id=hook.id,
                        tenancy=row.tenancy,
                        event_id=event_id,
                        event_type=event_type,
                        container_id=row.id,
                        body=body,
                        created_at=now,
                        next_attempt_at=now,
                        window_start=now,
                    )
                )
                queued += 1
    return queued
