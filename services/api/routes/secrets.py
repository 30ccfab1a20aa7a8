"""Tenant secrets: write-only values kept as Kubernetes Secrets in the tenancy's namespace.

Nothing of a value is stored in the API's database, logged, or returned: requests
carry it straight into the Secret; listings read back names and times only.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from core import crds
from core.kube import Forbidden, Invalid, KubeError, NotFound as KubeNotFound
from services.api import errors
from services.api.domain import tenant_secrets
from services.api.domain.models import (
    AuditAction,
    SecretCreate,
    SecretName,
    SecretPublic,
    SecretsPublic,
    SecretUpdate,
    TenancyName,
)
from services.api.kube import Kube
from services.api.routes import tenant_scope
from services.api.routes.deps import CurrentTenant, KubeDep, SessionDep
from services.api.store import audit

SecretNamePath = Annotated[
    SecretName,
    Path(
        description="The secret's name (a DNS label).",
        json_schema_extra={"pattern": tenant_secrets.SECRET_NAME.pattern, "maxLength": tenant_secrets.SECRET_NAME_MAX},
    ),
]

router = APIRouter(prefix="/v1/secrets", tags=["secrets"])

TenancyQuery = Annotated[TenancyName | None, Query(description="Admin tokens only: the tenancy acted on.")]


#: waits (s) before writing again after an RBAC refusal: the controller binds the API's Secret
#: rights in a tenancy's namespace as it makes it, and kube-apiserver's authoriser sees a new
#: RoleBinding only once its informer has it, so a write right after a tenancy turned Ready
#: can be refused for a moment (seen under load: 403, the tenant's first webhook a 503)
RBAC_SETTLE_WAITS = (0.25, 0.5, 1.0, 2.0)


def write(kube: Kube, body: dict, *, replace: bool, what: str, tenancy: str) -> bool:
    """Create/replace a Secret in the tenant namespace, translating Kubernetes' answers."""
    for wait in (*RBAC_SETTLE_WAITS, None):
        try:
            return _write_once(kube, body, replace=replace, what=what, tenancy=tenancy)
        except errors.Unavailable as exc:
            rbac = isinstance(exc.__cause__, Forbidden) and exc.__cause__.is_rbac
            if not rbac or wait is None:
                raise
            time.sleep(wait)
    raise AssertionError("unreachable")


def _write_once(kube: Kube, body: dict, *, replace: bool, what: str, tenancy: str) -> bool:
    try:
        return kube.create_secret(body, replace=replace)
    except KubeNotFound as exc:  # the namespace does not exist yet
        raise errors.Conflict(
            f"tenancy {tenancy!r} is not ready yet (its namespace does not exist); retry in a few seconds"
        ) from exc
    except (Invalid, Forbidden) as exc:
        if isinstance(exc, Forbidden) and exc.is_rbac:  # the platform's RBAC gap, not the tenant's input
            raise errors.Unavailable(f"cannot store the {what} now; retry later") from exc
        raise errors.BadRequest(f"Kubernetes refused the {what}: {exc}") from exc
    except KubeError as exc:
        raise errors.Unavailable(f"cannot store the {what} now (Kubernetes unavailable); retry later") from exc


def list_objects(kube: Kube, tenancy: str, kind: str) -> list[dict]:
    try:
        return kube.list_secrets_metadata(crds.tenant_namespace(tenancy), tenant_secrets.selector(kind))
    except KubeNotFound:
        return []
    except KubeError as exc:
        raise errors.Unavailable(f"cannot list now (Kubernetes unavailable): {exc}") from exc


def remove(kube: Kube, tenancy: str, name: str) -> bool:
    try:
        return kube.delete_secret(crds.tenant_namespace(tenancy), name)
    except KubeError as exc:
        raise errors.Unavailable(f"cannot delete now (Kubernetes unavailable): {exc}") from exc


def _find(kube: Kube, tenancy: str, name: str) -> SecretPublic:
    for obj in list_objects(kube, tenancy, tenant_secrets.KIND_SECRET):
        public = tenant_secrets.public_secret(obj)
        if public["name"] == name:
            return SecretPublic.model_validate(public)
    raise errors.NotFound(f"secret {name!r} not found")


@router.post("", status_code=201, response_model=SecretPublic)
def create_secret(
    body: SecretCreate, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> SecretPublic:
    """Store a secret (write-only); reference it from a container's env as ``{"secret": name}``."""
    name = tenant_scope.resolve(session, caller, tenancy)
    obj = tenant_secrets.build_secret(tenancy=name, name=body.name, value=body.value)
    if not write(kube, obj, replace=False, what="secret", tenancy=name):
        raise errors.Conflict(
            f"name: secret {body.name!r} already exists; PUT /v1/secrets/{body.name} replaces its value"
        )
    audit.record_now(
        session, caller.actor, tenancy=name, action=AuditAction.SECRET_PUT, target=body.name, detail="created"
    )
    return _find(kube, name, body.name)


@router.put("/{secret_name}", response_model=SecretPublic)
def replace_secret(
    secret_name: SecretNamePath,
    body: SecretUpdate,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    tenancy: TenancyQuery = None,
) -> SecretPublic:
    """Replace a secret's value (or create it); running containers keep the value they started with."""
    name = tenant_scope.resolve(session, caller, tenancy)
    write(
        kube,
        tenant_secrets.build_secret(tenancy=name, name=secret_name, value=body.value),
        replace=True,
        what="secret",
        tenancy=name,
    )
    audit.record_now(
        session, caller.actor, tenancy=name, action=AuditAction.SECRET_PUT, target=secret_name, detail="value set"
    )
    return _find(kube, name, secret_name)


@router.get("", response_model=SecretsPublic)
def list_secrets(
    session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> SecretsPublic:
    """The tenancy's secrets, by name (values are never returned)."""
    name = tenant_scope.resolve(session, caller, tenancy)
    rows = sorted(
        (tenant_secrets.public_secret(o) for o in list_objects(kube, name, tenant_secrets.KIND_SECRET)),
        key=lambda r: r["name"],
    )
    return SecretsPublic(data=[SecretPublic.model_validate(r) for r in rows], count=len(rows))


@router.get("/{secret_name}", response_model=SecretPublic)
def get_secret(
    secret_name: SecretNamePath, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> SecretPublic:
    """One secret's name and creation time (never its value)."""
    return _find(kube, tenant_scope.resolve(session, caller, tenancy), secret_name)


@router.delete("/{secret_name}", status_code=204)
def delete_secret(
    secret_name: SecretNamePath, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> Response:
    """Delete a secret; containers that reference it can no longer start."""
    name = tenant_scope.resolve(session, caller, tenancy)
    if not remove(kube, name, tenant_secrets.secret_object_name(secret_name)):
        raise errors.NotFound(f"secret {secret_name!r} not found")
    audit.record_now(session, caller.actor, tenancy=name, action=AuditAction.SECRET_DELETE, target=secret_name)
    return Response(status_code=204)
