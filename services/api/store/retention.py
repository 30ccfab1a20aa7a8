"""Retention: finished containers (and their pods, which hold their logs) are kept for
``retention_days`` after they finish, then pruned, so stored rows stay bounded; audit
events for ``audit_retention_days`` (:func:`prune_audit`).

The submission worker runs both every ``retention_interval_seconds``; with several
replicas each may run them, which is harmless (deletes are idempotent).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import Engine
from sqlmodel import Session, col, delete, select

from core import crds
from core.kube import KubeError
from services.api.domain.models import TERMINAL_STATUSES, Container, ContainerLog, ContainerRunLog, utcnow
from services.api.kube import Kube
from services.api.store import audit

log = logging.getLogger(__name__)


def prune(engine: Engine, kube: Kube, *, days: float, batch: int = 200) -> int:
    """Delete containers finished more than ``days`` ago, their pods first; returns the
    number of rows removed. A pod Kubernetes cannot delete now keeps its row for the
    next pass (so a pod is never left without a record)."""
    cutoff = utcnow() - timedelta(days=days)
    removed = 0
    while True:
        with Session(engine) as session:
            rows = session.exec(
                select(Container)
                .where(col(Container.status).in_(TERMINAL_STATUSES), col(Container.finished_at) < cutoff)
                .order_by(col(Container.finished_at))
                .limit(batch)
            ).all()
        if not rows:
            return removed
        gone: list[str] = []
        for row in rows:
            if row.pod_created and not row.pod_deleted:
                try:
                    kube.delete_pod(crds.tenant_namespace(row.tenancy), row.pod_name)
                except KubeError as exc:
                    log.warning("retention: pod of container %s not deleted now (%s)", row.id, exc)
                    continue
            gone.append(row.id)
        if gone:
            with Session(engine) as session:
                session.exec(delete(ContainerLog).where(col(ContainerLog.container_id).in_(gone)))
                session.exec(delete(ContainerRunLog).where(col(ContainerRunLog.container_id).in_(gone)))
                session.exec(delete(Container).where(col(Container.id).in_(gone)))
                session.commit()
            removed += len(gone)
            log.info("retention: pruned %d container(s) finished before %s", len(gone), cutoff.isoformat())
        if len(gone) < len(rows) or len(rows) < batch:
            return removed


def prune_audit(engine: Engine, *, days: float) -> int:
    """Delete audit events older than ``days``; returns how many."""
    removed = audit.prune(engine, days=days)
    if removed:
        log.info("retention: pruned %d audit event(s) older than %g days", removed, days)
    return removed
