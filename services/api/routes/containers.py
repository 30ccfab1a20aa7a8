"""Containers: submit, list, read, cancel, logs (tenant scope), and the admin listing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from gpucaas.core import crds
from services.api import crud, errors, log_archive, log_stream, sizing, tenant_secrets
from services.api.deps import AdminUser, CurrentTenant, KubeDep, SessionDep, SettingsDep, WorkerDep
from services.api.errors import KubeError, KubeNotFound
from services.api.models import (
    TERMINAL_STATUSES,
    Container,
    ContainerCreate,
    ContainerPublic,
    ContainersPublic,
    ContainerStatus,
    Tenancy,
    TenancyName,
    redacted_env,
)

router = APIRouter(prefix="/v1/containers", tags=["containers"])
admin_router = APIRouter(prefix="/v1/admin/containers", tags=["admin"])

Limit = Annotated[int, Query(ge=1, le=500, description="Page size (1-500).")]
Offset = Annotated[int, Query(ge=0, description="Rows to skip.")]
StatusFilter = Annotated[ContainerStatus | None, Query(description="Only containers in this status.")]


def to_public(row: Container) -> ContainerPublic:
    return ContainerPublic.model_validate(
        row, update={"namespace": crds.tenant_namespace(row.tenancy), "env": redacted_env(row.env)}
    )


def _not_found(container_id: str) -> errors.NotFound:
    return errors.NotFound(f"container {container_id!r} not found")


def _visible(session: SessionDep, caller: CurrentTenant, container_id: str) -> Container:
    row = crud.get_container(session, container_id=container_id, tenancy=caller.tenancy)
    if row is None:
        raise _not_found(container_id)
    return row


def _check_size(settings: SettingsDep, body: ContainerCreate, tenancy: Tenancy | None) -> None:
    """Overrides of the per-GPU sizing must fit in the tenancy's CPU and memory quota."""
    if tenancy is None or not (body.cpu or body.memory or body.shm_size):
        return
    share = settings.share
    size = sizing.size_for(share, body.gpus, cpu=body.cpu, memory=body.memory, shm_size=body.shm_size)
    quota = sizing.tenancy_quota(share, tenancy.gpu_quota)
    if size.cpu_milli > quota["cpu_milli"]:
        raise errors.Invalid(f"cpu: {sizing.format_cpu(size.cpu_milli)} is more than tenancy {tenancy.name!r} "
                             f"may use ({sizing.format_cpu(quota['cpu_milli'])} CPUs)")
    if size.memory_bytes > quota["memory_bytes"]:
        raise errors.Invalid(f"memory: {sizing.format_bytes(size.memory_bytes)} is more than tenancy "
                             f"{tenancy.name!r} may use ({sizing.format_bytes(quota['memory_bytes'])})")
    if size.shm_bytes > size.memory_bytes:
        raise errors.Invalid(f"shm_size: {sizing.format_bytes(size.shm_bytes)} is more than the container's memory "
                             f"({sizing.format_bytes(size.memory_bytes)}); /dev/shm lives in the VM's memory")


def _check_secret_refs(kube: KubeDep, tenancy: str, refs: dict[str, str]) -> None:
    """Refuse env references to secrets that do not exist, when Kubernetes answers now
    (when it does not, the submission is kept and the worker checks before the pod)."""
    try:
        objs = kube.list_secrets_metadata(crds.tenant_namespace(tenancy),
                                          tenant_secrets.selector(tenant_secrets.KIND_SECRET))
    except KubeError:
        return
    have = {tenant_secrets.public_secret(o)["name"] for o in objs}
    missing = [f"env.{var}: secret {name!r} not found" for var, name in sorted(refs.items()) if name not in have]
    if missing:
        raise errors.Invalid("; ".join(missing) + " (create it first with POST /v1/secrets)")


@router.post("", status_code=202, response_model=ContainerPublic)
def submit_container(
    body: ContainerCreate,
    session: SessionDep,
    caller: CurrentTenant,
    settings: SettingsDep,
    worker: WorkerDep,
    kube: KubeDep,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> ContainerPublic:
    """Queue a container (committed before the 202); the worker creates its pod."""
    if caller.is_admin:
        if body.tenancy is None:
            raise errors.Invalid("tenancy: field required with an admin token (a DNS-label tenancy name)")
        name = crud.ensure_tenancy(
            session, name=body.tenancy, gpu_quota=settings.default_gpu_quota, pod_quota=settings.default_pod_quota
        ).name
    else:
        name = body.tenancy or caller.tenancy or ""
        if name != caller.tenancy:  # another tenancy's name: as if it did not exist
            raise errors.NotFound(f"tenancy {name!r} not found")
    _check_size(settings, body, crud.get_tenancy(session, name=name))
    if body.secret_refs:
        _check_secret_refs(kube, name, body.secret_refs)
    row, created = crud.submit_container(session, tenancy_name=name, data=body, idempotency_key=idempotency_key)
    if created:
        request.app.state.metrics.submissions.inc()
        if worker is not None:
            worker.wake()
    response.headers["Location"] = f"/v1/containers/{row.id}"
    return to_public(row)


@router.get("", response_model=ContainersPublic)
def list_containers(
    session: SessionDep, caller: CurrentTenant, status: StatusFilter = None, limit: Limit = 50, offset: Offset = 0
) -> ContainersPublic:
    """The caller's containers, newest first, paginated, optionally filtered by status."""
    rows, total = crud.list_containers(session, tenancy=caller.tenancy, status=status, limit=limit, offset=offset)
    return ContainersPublic(data=[to_public(r) for r in rows], count=total, limit=limit, offset=offset)


@router.get("/{container_id}", response_model=ContainerPublic)
def get_container(container_id: str, session: SessionDep, caller: CurrentTenant) -> ContainerPublic:
    """One container (404 when it is not the caller's)."""
    return to_public(_visible(session, caller, container_id))


@router.delete("/{container_id}", response_model=ContainerPublic)
def cancel_container(
    container_id: str, session: SessionDep, caller: CurrentTenant, worker: WorkerDep
) -> ContainerPublic:
    """Cancel: status becomes Cancelled and the worker deletes the pod."""
    row = _visible(session, caller, container_id)
    if row.status in TERMINAL_STATUSES:
        if row.status == ContainerStatus.CANCELLED:
            return to_public(row)
        raise errors.Conflict(f"container {container_id!r} already finished ({row.status})")
    row = crud.cancel_container(session, container=row)
    if worker is not None:
        worker.wake()
    return to_public(row)


@router.get("/{container_id}/logs", response_class=PlainTextResponse)
def container_logs(
    container_id: str,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    follow: bool = False,
    tail_lines: Annotated[int | None, Query(ge=1, le=100000)] = None,
) -> Response:
    """The container's output: live from its pod (``follow=true`` streams until it ends),
    or, once it has finished, the tail kept by the API (served after the pod is gone)."""
    row = _visible(session, caller, container_id)
    kept = log_archive.get(session, container_id=row.id) if row.status in TERMINAL_STATUSES else None
    if kept is not None:
        return PlainTextResponse(log_archive.tail_lines(kept.text, tail_lines))
    if not row.pod_created:
        raise errors.Conflict(f"container {container_id!r} has no pod yet (status {row.status})")
    try:
        resp = kube.pod_log(crds.tenant_namespace(row.tenancy), row.pod_name, follow=follow, tail_lines=tail_lines)
    except KubeNotFound as exc:
        kept = log_archive.get(session, container_id=row.id)
        if kept is not None:  # the pod went while the container was being marked finished
            return PlainTextResponse(log_archive.tail_lines(kept.text, tail_lines))
        raise errors.NotFound(f"the pod of container {container_id!r} no longer exists and no log was kept") from exc
    except KubeError as exc:
        raise errors.Unavailable(f"logs unavailable: {exc}") from exc

    if not follow:
        try:
            return PlainTextResponse(resp.data.decode(errors="replace"))
        finally:
            resp.release_conn()

    return StreamingResponse(log_stream.relay(resp), media_type="text/plain; charset=utf-8")


@admin_router.get("", response_model=ContainersPublic)
def admin_list_containers(
    session: SessionDep,
    _admin: AdminUser,
    tenancy: TenancyName | None = None,
    status: StatusFilter = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> ContainersPublic:
    """Every tenancy's containers (admin), optionally by tenancy and status."""
    rows, total = crud.list_containers(session, tenancy=tenancy, status=status, limit=limit, offset=offset)
    return ContainersPublic(data=[to_public(r) for r in rows], count=total, limit=limit, offset=offset)
