"""Registry credentials: one ``kubernetes.io/dockerconfigjson`` Secret per registry server
in the tenancy's namespace; every tenant pod lists them in ``imagePullSecrets``.
Listed without the password; the password is never stored in the API's database."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from services.api import errors
from services.api.domain import tenant_secrets
from services.api.domain.models import (
    AuditAction,
    RegistryCredentialCreate,
    RegistryCredentialPublic,
    RegistryCredentialsPublic,
)
from services.api.kube import Kube
from services.api.routes import tenant_scope
from services.api.routes.deps import CurrentTenant, KubeDep, SessionDep
from services.api.routes.secrets import TenancyQuery, list_objects, remove, write
from services.api.store import audit

ServerPath = Annotated[
    str,
    Path(
        description="The registry server as registered: host[:port].",
        json_schema_extra={"pattern": r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$", "maxLength": 253},
    ),
]

router = APIRouter(prefix="/v1/registry-credentials", tags=["registry credentials"])


def _all(kube: Kube, tenancy: str) -> list[RegistryCredentialPublic]:
    rows = [tenant_secrets.public_registry(o) for o in list_objects(kube, tenancy, tenant_secrets.KIND_REGISTRY)]
    return [RegistryCredentialPublic.model_validate(r) for r in sorted(rows, key=lambda r: r["server"])]


@router.post("", status_code=201, response_model=RegistryCredentialPublic)
def create_registry_credential(
    body: RegistryCredentialCreate,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    tenancy: TenancyQuery = None,
) -> RegistryCredentialPublic:
    """Store (or replace) the credential for one registry server; pods pull with it from then on."""
    name = tenant_scope.resolve(session, caller, tenancy)
    obj = tenant_secrets.build_registry_secret(
        tenancy=name, server=body.server, username=body.username, password=body.password
    )
    write(kube, obj, replace=True, what="registry credential", tenancy=name)
    audit.record_now(
        session,
        caller.actor,
        tenancy=name,
        action=AuditAction.REGISTRY_CREDENTIAL_PUT,
        target=body.server,
        detail=f"username {body.username!r}",
    )
    for row in _all(kube, name):
        if row.server == body.server:
            return row
    raise errors.Unavailable("the registry credential was stored but cannot be read back yet; list again")


@router.get("", response_model=RegistryCredentialsPublic)
def list_registry_credentials(
    session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> RegistryCredentialsPublic:
    """The tenancy's registry credentials: server and username, never the password."""
    rows = _all(kube, tenant_scope.resolve(session, caller, tenancy))
    return RegistryCredentialsPublic(data=rows, count=len(rows))


@router.delete("/{server}", status_code=204)
def delete_registry_credential(
    server: ServerPath, session: SessionDep, caller: CurrentTenant, kube: KubeDep, tenancy: TenancyQuery = None
) -> Response:
    """Forget the credential for ``server`` (e.g. ``nvcr.io``)."""
    name = tenant_scope.resolve(session, caller, tenancy)
    try:
        host = tenant_secrets.check_registry_server(server)
    except ValueError as exc:
        raise errors.Invalid(f"server: {exc}") from exc
    if not remove(kube, name, tenant_secrets.registry_object_name(host)):
        raise errors.NotFound(f"no registry credential for {host!r}")
    audit.record_now(session, caller.actor, tenancy=name, action=AuditAction.REGISTRY_CREDENTIAL_DELETE, target=host)
    return Response(status_code=204)
