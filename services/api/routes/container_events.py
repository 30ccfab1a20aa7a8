"""A container's timeline: ``GET /v1/containers/{id}/events`` (tenant scope, 404 for others)."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from sqlmodel import SQLModel

from core import crds
from core.kube import KubeError, NotFound as KubeNotFound
from services.api import errors
from services.api.domain import events
from services.api.routes.containers import ContainerId
from services.api.routes.deps import CurrentTenant, KubeDep, SessionDep
from services.api.store import containers as container_store

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/containers", tags=["containers"])


class ContainerEvent(SQLModel):
    time: str
    kind: str
    message: str
    source: str


class ContainerEvents(SQLModel):
    data: list[ContainerEvent]
    count: int


@router.get("/{container_id}/events", response_model=ContainerEvents)
def container_events(
    container_id: ContainerId, session: SessionDep, caller: CurrentTenant, kube: KubeDep
) -> ContainerEvents:
    """The container's timeline: queued, scheduled (or why not), GPUs allocated, pulling, running, finished."""
    row = container_store.get_container(session, container_id=container_id, tenancy=caller.tenancy)
    if row is None:
        raise errors.NotFound(f"container {container_id!r} not found")
    ns = crds.tenant_namespace(row.tenancy)
    pod, pod_events, leases = None, [], []
    if row.pod_created and not row.pod_deleted:
        try:
            pod = kube.get_pod(ns, row.pod_name)
            pod_events = kube.list_pod_events(ns, row.pod_name)
            leases = events.leases_of_pod(kube.list_cluster_objects(crds.GPULEASE_PLURAL), ns, row.pod_name)
        except KubeNotFound:
            pass  # the pod is gone: what the API kept is the timeline
        except KubeError as exc:
            log.info("container %s: events from Kubernetes unavailable (%s)", row.id, exc)
    entries = events.timeline(container=row.model_dump(), pod=pod, pod_events=pod_events, leases=leases)
    return ContainerEvents(data=[ContainerEvent.model_validate(e) for e in entries], count=len(entries))
