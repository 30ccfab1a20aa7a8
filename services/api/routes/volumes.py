"""Tenant volumes: PersistentVolumeClaims in the tenancy's namespace that containers mount by name.

The claims are the record (``services.api.domain.volumes``): nothing about a volume is kept in the
API's database except, on each container, the names it mounts. The tenancy's storage quota
is checked here against the claims Kubernetes holds, and the namespace's ResourceQuota
(written by the tenancy controller from the Tenancy's ``spec.volumes``) holds the same
figures. A volume that an active container mounts cannot be deleted (409 naming them).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from sqlmodel import Session

from core import crds
from core.kube import Forbidden, Invalid, KubeError, NotFound as KubeNotFound
from services.api import errors
from services.api.domain import sizing, volumes
from services.api.domain.models import VolumeCreate, VolumeName, VolumePublic, VolumesPublic
from services.api.kube import Kube
from services.api.routes import tenant_scope
from services.api.routes.deps import CurrentTenant, KubeDep, SessionDep, SettingsDep
from services.api.routes.secrets import TenancyQuery
from services.api.store import audit, containers as container_store, worker_state

VolumeNamePath = Annotated[
    VolumeName,
    Path(
        description="The volume's name (a DNS label).",
        json_schema_extra={"pattern": volumes.NAME.pattern, "maxLength": volumes.NAME_MAX},
    ),
]

router = APIRouter(prefix="/v1/volumes", tags=["volumes"])


def claims(kube: Kube, tenancy: str) -> list[dict]:
    """The tenancy's volume claims (none while its namespace does not exist)."""
    try:
        return kube.list_pvcs(crds.tenant_namespace(tenancy), volumes.selector())
    except KubeNotFound:
        return []
    except KubeError as exc:
        raise errors.Unavailable(f"cannot list volumes now (Kubernetes unavailable): {exc}") from exc


def _find(objs: list[dict], name: str) -> VolumePublic | None:
    for obj in objs:
        public = volumes.public_volume(obj)
        if public["name"] == name:
            return VolumePublic.model_validate(public)
    return None


def _not_found(name: str) -> errors.NotFound:
    return errors.NotFound(f"volume {name!r} not found")


def check_mounts(kube: Kube, tenancy: str, names: list[str]) -> None:
    """Refuse a container that mounts volumes the tenancy does not have, when Kubernetes
    answers now (when it does not, the worker checks before the pod)."""
    try:
        objs = kube.list_pvcs(crds.tenant_namespace(tenancy), volumes.selector())
    except KubeNotFound:
        objs = []
    except KubeError:
        return
    have = {volumes.public_volume(o)["name"] for o in objs}
    missing = [f"volumes: volume {n!r} not found" for n in names if n not in have]
    if missing:
        raise errors.Invalid("; ".join(missing) + " (create it first with POST /v1/volumes)")


@router.post("", status_code=201, response_model=VolumePublic)
def create_volume(
    body: VolumeCreate,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    settings: SettingsDep,
    tenancy: TenancyQuery = None,
) -> VolumePublic:
    """Create a volume of ``size`` (a Kubernetes quantity) within the tenancy's storage quota."""
    name = tenant_scope.resolve(session, caller, tenancy)
    quota = settings.volume_quota
    size = sizing.parse_bytes(body.size)
    have = claims(kube, name)
    if _find(have, body.name) is not None:
        raise errors.Conflict(f"name: volume {body.name!r} already exists")
    if len(have) >= quota.count:
        raise errors.QuotaExceeded(
            f"volumes: tenancy {name!r} has {len(have)} of its {quota.count} volumes; delete one first "
            "(DELETE /v1/volumes/{name})",
            quota=quota.count,
            in_use=len(have),
        )
    used = volumes.claimed_bytes(have)
    if used + size > quota.storage_bytes:
        left = max(quota.storage_bytes - used, 0)
        raise errors.QuotaExceeded(
            f"size: {body.size} is more than the {sizing.format_bytes(left)} left of the storage quota of tenancy "
            f"{name!r} ({sizing.format_bytes(quota.storage_bytes)}, {sizing.format_bytes(used)} in use); ask for less "
            "or delete a volume",
            quota=sizing.format_bytes(quota.storage_bytes),
            in_use=sizing.format_bytes(used),
        )
    obj = volumes.build_pvc(tenancy=name, name=body.name, size_bytes=size, storage_class=quota.storage_class)
    try:
        created = kube.create_pvc(obj)
    except KubeNotFound as exc:  # the namespace does not exist yet
        raise errors.Conflict(
            f"tenancy {name!r} is not ready yet (its namespace does not exist); retry in a few seconds"
        ) from exc
    except (Invalid, Forbidden) as exc:
        if isinstance(exc, Forbidden) and exc.is_rbac:  # the platform's RBAC gap, not the tenant's input
            raise errors.Unavailable("cannot create the volume now; retry later") from exc
        # the namespace's ResourceQuota, or the cluster's own rules, refused it
        raise errors.Conflict(f"Kubernetes refused the volume: {exc}") from exc
    except KubeError as exc:
        raise errors.Unavailable(f"cannot create the volume now (Kubernetes unavailable): {exc}") from exc
    if not created:
        raise errors.Conflict(f"name: volume {body.name!r} already exists")
    _audit(session, caller, name, body.name, "create")
    found = _find(claims(kube, name), body.name)
    return found or VolumePublic.model_validate(volumes.public_volume(obj))


def _audit(session: Session, caller: CurrentTenant, tenancy: str, volume: str, change: audit.Change) -> None:
    audit.volume_changed(session, caller.actor, tenancy=tenancy, volume=volume, change=change)
    session.commit()


@router.get("", response_model=VolumesPublic)
def list_volumes(
    session: SessionDep, caller: CurrentTenant, kube: KubeDep, settings: SettingsDep, tenancy: TenancyQuery = None
) -> VolumesPublic:
    """The tenancy's volumes by name, with its storage quota and what they use of it."""
    objs = claims(kube, tenant_scope.resolve(session, caller, tenancy))
    rows = sorted((volumes.public_volume(o) for o in objs), key=lambda r: r["name"])
    quota = settings.volume_quota
    return VolumesPublic(
        data=[VolumePublic.model_validate(r) for r in rows],
        count=len(rows),
        storage_quota=sizing.format_bytes(quota.storage_bytes),
        storage_used=sizing.format_bytes(volumes.claimed_bytes(objs)),
        max_volumes=quota.count,
    )


@router.get("/{volume_name}", response_model=VolumePublic)
def get_volume(
    volume_name: VolumeNamePath, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> VolumePublic:
    """One volume: its size, status and creation time."""
    found = _find(claims(kube, tenant_scope.resolve(session, caller, tenancy)), volume_name)
    if found is None:
        raise _not_found(volume_name)
    return found


@router.delete("/{volume_name}", status_code=204)
def delete_volume(
    volume_name: VolumeNamePath, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> Response:
    """Delete a volume and its data; refused (409) while an active container mounts it."""
    name = tenant_scope.resolve(session, caller, tenancy)
    if _find(claims(kube, name), volume_name) is None:
        raise _not_found(volume_name)
    users, finished = container_store.containers_using_volume(session, tenancy=name, volume=volume_name)
    if users:
        raise errors.Conflict(
            f"volume {volume_name!r} is in use by container(s) {', '.join(users)}; cancel them "
            "(DELETE /v1/containers/{id}) or wait until they finish",
            containers=users,
        )
    namespace = crds.tenant_namespace(name)
    try:
        # Kubernetes keeps a claim while any pod names it, finished ones included (the
        # pvc-protection finalizer); their status and log are already kept by the API
        for row in finished:
            kube.delete_pod(namespace, row.pod_name)
            worker_state.mark_pod_deleted(session, container_id=row.id)
        removed = kube.delete_pvc(namespace, volumes.pvc_name(volume_name))
    except KubeError as exc:
        raise errors.Unavailable(f"cannot delete the volume now (Kubernetes unavailable): {exc}") from exc
    if not removed:
        raise _not_found(volume_name)
    _audit(session, caller, name, volume_name, "delete")
    return Response(status_code=204)
