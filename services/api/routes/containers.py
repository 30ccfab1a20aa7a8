"""Containers: submit, list, read, cancel, logs (tenant scope), and the admin listing."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Path as FPath, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from sqlalchemy import Engine, Row
from sqlmodel import Session
from starlette.background import BackgroundTask

from core import crds, kueue
from core.kube import KubeError, NotFound as KubeNotFound
from services.api import errors
from services.api.domain import endpoints, images, queue, sizing, tenant_secrets
from services.api.domain.models import (
    TERMINAL_STATUSES,
    Container,
    ContainerCreate,
    ContainerPublic,
    ContainerReason,
    ContainersPublic,
    ContainerStatus,
    TenancyName,
    redacted_env,
)
from services.api.edge.limits import Limiter
from services.api.kube import Kube
from services.api.routes import pagination, volumes as volume_routes
from services.api.routes.deps import AdminUser, Caller, CurrentTenant, KubeDep, SessionDep, SettingsDep, WorkerDep
from services.api.settings import Settings
from services.api.store import admission, containers as container_store, log_archive, tenancies as tenancy_store
from services.api.streams import log_stream

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/containers", tags=["containers"])
admin_router = APIRouter(prefix="/v1/admin/containers", tags=["admin"])

Limit = Annotated[int, Query(ge=1, le=500, description="Page size (1-500).")]
MAX_OFFSET = 1_000_000_000  # far beyond any table, far below the databases' 64-bit limit
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description=f"Rows to skip (0-{MAX_OFFSET}).")]
After = Annotated[
    str | None,
    Query(
        max_length=256,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Keyset cursor: the 'next' value of the previous page (newest first), URL-safe base64.",
    ),
]
StatusFilter = Annotated[ContainerStatus | None, Query(description="Only containers in this status.")]
# Container ids are lowercase hex (security.bearer.new_id). The schema says so; any other value
# simply names no container (404, like another tenant's id), so it is not validated here.
ContainerId = Annotated[
    str,
    FPath(
        description="The container's id (lowercase hex).",
        json_schema_extra={"pattern": r"^[0-9a-f]{1,64}$", "maxLength": 64},
    ),
]


# The logs route answers text/plain, its errors JSON like everywhere else (FastAPI would
# file the error model under the route's text/plain media type).
_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorBody"}
_JSON_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"description": r["description"], "content": {"application/json": {"schema": _ERROR_SCHEMA}}}
    for code, r in errors.ERROR_RESPONSES.items()
}


#: the public fields read straight from a container row (namespace and env are derived)
_ROW_FIELDS = tuple(
    name for name in ContainerPublic.model_fields if name not in ("namespace", "env", "endpoints", "queue", "attempt")
)


def to_public(row: Container | SimpleNamespace | Row[Any], endpoint_domain: str) -> ContainerPublic:
    # From a dict, not from the row's attributes with ``update=``: SQLModel wraps such an
    # object to merge the update and reads each field through that wrapper, twice the cost
    # (23 against 12 us a container; a page of 20 on every list, one on every submission).
    values = {name: getattr(row, name) for name in _ROW_FIELDS}
    values["namespace"] = crds.tenant_namespace(row.tenancy)
    values["env"] = redacted_env(row.env)
    values["attempt"] = row.preemptions + 1
    if row.ports and row.status not in TERMINAL_STATUSES:
        values["endpoints"] = endpoints.public_endpoints(row.id, row.ports, endpoint_domain)
    return ContainerPublic.model_validate(values)


def _with_queue(
    containers: list[ContainerPublic], session: Session, kube: Kube, settings: Settings
) -> list[ContainerPublic]:
    """Fill ``queue`` on the waiting ones, with queueing by Kueue: one read of Workloads per
    tenancy among them, in its own namespace only. Kubernetes not answering leaves it null (a
    read never fails for an extra)."""
    if settings.queueing != kueue.KUEUE:
        return containers
    tenancies = {c.tenancy for c in containers if c.status == ContainerStatus.PENDING and c.node_name is None}
    for tenancy in sorted(tenancies):
        waiting = container_store.waiting_pods(session, tenancy=tenancy)
        if not waiting:
            continue
        try:
            workloads = kube.list_workloads(crds.tenant_namespace(tenancy))
        except KubeError as exc:
            log.info("tenancy %s: queue positions unavailable (%s)", tenancy, exc)
            continue
        mine = [c for c in containers if c.tenancy == tenancy]
        requeued = {c.pod_name for c in mine if c.reason == ContainerReason.PREEMPTED}
        spots = queue.spots(workloads, waiting, requeued=requeued)
        for c in mine:
            c.queue = spots.get(c.pod_name)
    return containers


def _not_found(container_id: str) -> errors.NotFound:
    return errors.NotFound(f"container {container_id!r} not found")


def _visible(session: SessionDep, caller: CurrentTenant, container_id: str) -> Container:
    row = container_store.get_container(session, container_id=container_id, tenancy=caller.tenancy)
    if row is None:
        raise _not_found(container_id)
    return row


def _check_size(settings: SettingsDep, body: ContainerCreate, session: SessionDep, name: str) -> None:
    """Overrides of the per-GPU sizing must fit in the tenancy's CPU and memory quota
    (the tenancy is read only when there are overrides)."""
    if not _has_overrides(body):
        return
    tenancy = tenancy_store.get_tenancy(session, name=name)
    if tenancy is None:
        return
    share = settings.share
    size = sizing.size_for(share, body.gpus, cpu=body.cpu, memory=body.memory, shm_size=body.shm_size)
    quota = sizing.tenancy_quota(share, tenancy.gpu_quota)
    if size.cpu_milli > quota["cpu_milli"]:
        raise errors.Invalid(
            f"cpu: {sizing.format_cpu(size.cpu_milli)} is more than tenancy {tenancy.name!r} "
            f"may use ({sizing.format_cpu(quota['cpu_milli'])} CPUs)"
        )
    if size.memory_bytes > quota["memory_bytes"]:
        raise errors.Invalid(
            f"memory: {sizing.format_bytes(size.memory_bytes)} is more than tenancy "
            f"{tenancy.name!r} may use ({sizing.format_bytes(quota['memory_bytes'])})"
        )
    if size.shm_bytes > size.memory_bytes:
        raise errors.Invalid(
            f"shm_size: {sizing.format_bytes(size.shm_bytes)} is more than the container's memory "
            f"({sizing.format_bytes(size.memory_bytes)}); /dev/shm lives in the VM's memory"
        )


def _check_secret_refs(kube: KubeDep, tenancy: str, refs: dict[str, str]) -> None:
    """Refuse env references to secrets that do not exist, when Kubernetes answers now
    (when it does not, the submission is kept and the worker checks before the pod)."""
    try:
        objs = kube.list_secrets_metadata(
            crds.tenant_namespace(tenancy), tenant_secrets.selector(tenant_secrets.KIND_SECRET)
        )
    except KubeError:
        return
    have = {tenant_secrets.public_secret(o)["name"] for o in objs}
    missing = [f"env.{var}: secret {name!r} not found" for var, name in sorted(refs.items()) if name not in have]
    if missing:
        raise errors.Invalid("; ".join(missing) + " (create it first with POST /v1/secrets)")


@router.post("", status_code=202, response_model=ContainerPublic)
async def submit_container(
    body: ContainerCreate,
    caller: CurrentTenant,
    request: Request,
    idempotency_key: Annotated[
        str | None,
        Header(pattern=r"^[!-~]{1,255}$", description="Printable ASCII, at most 255 characters."),
    ] = None,
) -> Response:
    """Queue a container (committed before the 202); the worker creates its pod.

    A tenant's plain submission on PostgreSQL runs on the event loop (one admission
    statement on psycopg's asyncio pool, see ``store.admission.submit_container_async``); an admin's, one
    with sizing overrides or secret references (which read the tenancy or ask
    Kubernetes first), and every submission on SQLite run on a worker thread."""
    state = request.app.state  # settings, engines, worker: read here, not as dependencies (hot path)
    settings: Settings = state.settings
    why = images.refusal(body.image_ref, settings.image_registry_allowlist)
    if why is not None:
        field = "image" if body.image else "container-url"
        raise errors.Invalid(
            f"{field}: {why}; allowed: a public registry, or one on the operator's allow-list "
            "(GPUCAAS_IMAGE_REGISTRY_ALLOWLIST)"
        )
    if not caller.is_admin:
        name = body.tenancy or caller.tenancy or ""
        if name != caller.tenancy:  # another tenancy's name: as if it did not exist
            raise errors.NotFound(f"tenancy {name!r} not found")
    pool = getattr(state, "admission_pool", None)
    if (
        pool is not None
        and not caller.is_admin
        and not _has_overrides(body)
        and not body.secret_refs
        and not body.volumes
    ):
        row, created = await admission.submit_container_async(
            pool, state.engine, tenancy_name=name, data=body, idempotency_key=idempotency_key, actor=caller.actor
        )
    else:
        row, created = await anyio.to_thread.run_sync(
            _submit_on_thread, state.engine, settings, state.kube, caller, body, idempotency_key
        )
    if created:
        state.metrics.submissions.inc()
        if state.worker is not None:
            state.worker.wake()
    # serialised here, once (a returned model would be validated again against response_model)
    return Response(
        to_public(row, settings.endpoint_domain).model_dump_json(),
        status_code=202,
        media_type="application/json",
        headers={"Location": f"/v1/containers/{row.id}"},
    )


def _has_overrides(body: ContainerCreate) -> bool:
    return bool(body.cpu or body.memory or body.shm_size)


def _submit_on_thread(
    engine: Engine,
    settings: Settings,
    kube: Kube,
    caller: Caller,
    body: ContainerCreate,
    idempotency_key: str | None,
) -> tuple[Container | SimpleNamespace, bool]:
    with Session(engine, expire_on_commit=False) as session:
        if caller.is_admin:
            if body.tenancy is None:
                raise errors.Invalid("tenancy: field required with an admin token (a DNS-label tenancy name)")
            name = tenancy_store.ensure_tenancy(
                session,
                name=body.tenancy,
                gpu_quota=settings.default_gpu_quota,
                pod_quota=settings.default_pod_quota,
            ).name
        else:
            name = caller.tenancy or ""
        _check_size(settings, body, session, name)
        if body.secret_refs:
            _check_secret_refs(kube, name, body.secret_refs)
        if body.volumes:
            volume_routes.check_mounts(kube, name, [m.name for m in body.volumes])
        return admission.submit_container(
            session, tenancy_name=name, data=body, idempotency_key=idempotency_key, actor=caller.actor
        )


@router.get("", response_model=ContainersPublic)
def list_containers(
    session: SessionDep,
    caller: CurrentTenant,
    settings: SettingsDep,
    kube: KubeDep,
    status: StatusFilter = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: After = None,
) -> Response:
    """The caller's containers, newest first, optionally filtered by status. Page with
    ``after`` (the previous page's ``next``: as fast on any page) or ``offset``."""
    page = _page(
        session,
        tenancy=caller.tenancy,
        status=status,
        limit=limit,
        offset=offset,
        after=after,
        history=False,
        endpoint_domain=settings.endpoint_domain,
    )
    _with_queue(page.data, session, kube, settings)
    return _json(page)


def _page(
    session: SessionDep,
    *,
    tenancy: str | None,
    status: ContainerStatus | None,
    limit: int,
    offset: int,
    after: str | None,
    history: bool,
    endpoint_domain: str,
) -> ContainersPublic:
    key = pagination.decode(after) if after is not None else None
    rows, total, last = container_store.list_containers(
        session, tenancy=tenancy, status=status, limit=limit, offset=offset, after=key, history=history
    )
    return ContainersPublic(
        data=[to_public(r, endpoint_domain) for r in rows],
        count=total,
        limit=limit,
        offset=offset,
        next=pagination.encode(last) if last is not None else None,
    )


def _json(model: ContainersPublic) -> Response:
    """The page serialised once (a returned model would be validated again against response_model)."""
    return Response(model.model_dump_json(), media_type="application/json")


@router.get("/{container_id}", response_model=ContainerPublic)
def get_container(
    container_id: ContainerId, session: SessionDep, caller: CurrentTenant, settings: SettingsDep, kube: KubeDep
) -> ContainerPublic:
    """One container (404 when it is not the caller's); while it waits, where it stands (``queue``)."""
    public = to_public(_visible(session, caller, container_id), settings.endpoint_domain)
    return _with_queue([public], session, kube, settings)[0]


@router.delete("/{container_id}", response_model=ContainerPublic)
def cancel_container(
    container_id: ContainerId, session: SessionDep, caller: CurrentTenant, worker: WorkerDep, settings: SettingsDep
) -> ContainerPublic:
    """Cancel: status becomes Cancelled and the worker deletes the pod (and its endpoints)."""
    row = _visible(session, caller, container_id)
    if row.status in TERMINAL_STATUSES:
        if row.status == ContainerStatus.CANCELLED:
            return to_public(row, settings.endpoint_domain)
        raise errors.Conflict(f"container {container_id!r} already finished ({row.status})")
    row = container_store.cancel_container(session, container=row, actor=caller.actor)
    if worker is not None:
        worker.wake()
    return to_public(row, settings.endpoint_domain)


@router.get(
    "/{container_id}/logs",
    response_class=PlainTextResponse,
    responses=_JSON_ERRORS,
)
def container_logs(
    container_id: ContainerId,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    request: Request,
    follow: bool = False,
    tail_lines: Annotated[int | None, Query(ge=1, le=100000)] = None,
    attempt: Annotated[
        int | None,
        Query(
            ge=1,
            le=100000,
            description="Which run's output (the container's `attempt` counts them; left out: the current "
            "one). An earlier run, which the queue preempted, is served from the tail kept when it ended.",
        ),
    ] = None,
) -> Response:
    """The container's output: live from its pod (``follow=true`` streams until it ends),
    or, once it has finished, the tail kept by the API (served after the pod is gone).
    ``attempt``: an earlier run's kept tail (a container put back in the queue after a
    preemption, docs/queues.md).

    A follow holds no database connection (the session is closed before streaming)
    and no shared worker thread while it waits; each token and tenancy may hold a
    bounded number of them at once (429 with Retry-After beyond).
    """
    row = _visible(session, caller, container_id)
    current = row.preemptions + 1
    if attempt is not None and attempt > current:
        raise errors.NotFound(f"container {container_id!r} has no attempt {attempt}: it is on attempt {current}")
    if attempt is not None and attempt < current:
        earlier = log_archive.get(session, container_id=row.id, run=attempt)
        if earlier is None:
            raise errors.NotFound(f"no log was kept of attempt {attempt} of container {container_id!r}")
        return PlainTextResponse(log_archive.tail_lines(earlier.text, tail_lines))
    kept = log_archive.get(session, container_id=row.id) if row.status in TERMINAL_STATUSES else None
    if kept is not None:
        return PlainTextResponse(log_archive.tail_lines(kept.text, tail_lines))
    session.close()  # give the connection back now, not when the stream ends
    if not row.pod_created:
        raise errors.Conflict(f"container {container_id!r} has no pod yet (status {row.status})")
    limiter: Limiter = request.app.state.limiter
    # 429 here when the token or its tenancy has too many streams open
    slot = limiter.stream(token_id=caller.token_id, tenancy=caller.tenancy) if follow else None
    release = slot.release if slot is not None else (lambda: None)
    try:
        resp = kube.pod_log(crds.tenant_namespace(row.tenancy), row.pod_name, follow=follow, tail_lines=tail_lines)
    except KubeNotFound as exc:
        release()
        kept = log_archive.get(session, container_id=row.id)
        if kept is not None:  # the pod went while the container was being marked finished
            return PlainTextResponse(log_archive.tail_lines(kept.text, tail_lines))
        raise errors.NotFound(f"the pod of container {container_id!r} no longer exists and no log was kept") from exc
    except KubeError as exc:
        release()
        raise errors.Unavailable(f"logs unavailable: {exc}") from exc
    except BaseException:
        release()
        raise

    if not follow:
        try:
            return PlainTextResponse(resp.data.decode(errors="replace"))
        finally:
            resp.release_conn()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in log_stream.relay(resp):
                yield chunk
        finally:
            release()

    # The background task releases the slot too, should the body never start.
    return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8", background=BackgroundTask(release))


@admin_router.get("", response_model=ContainersPublic)
def admin_list_containers(
    session: SessionDep,
    _admin: AdminUser,
    settings: SettingsDep,
    tenancy: TenancyName | None = None,
    status: StatusFilter = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: After = None,
) -> Response:
    """Every tenancy's containers (admin), optionally by tenancy and status; those of
    deleted tenancies are kept as history until retention prunes them. Paged like the
    tenant listing (``after`` or ``offset``)."""
    return _json(
        _page(
            session,
            tenancy=tenancy,
            status=status,
            limit=limit,
            offset=offset,
            after=after,
            history=True,
            endpoint_domain=settings.endpoint_domain,
        )
    )
