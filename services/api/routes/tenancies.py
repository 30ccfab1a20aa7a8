"""Tenancies and their tokens (admin only). The database row is the source; the
Tenancy custom resource is upserted from it (here when Kubernetes answers; the worker
pushes every row whose resource lags, and again before every submission)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Response

from core.kube import KubeError
from services.api import errors
from services.api.domain.models import (
    TenanciesPublic,
    Tenancy,
    TenancyCreate,
    TenancyName,
    TenancyPublic,
    TenancyUpdate,
    TokenCreate,
    TokenIssued,
    TokenPublic,
    TokensPublic,
)
from services.api.kube import Kube
from services.api.routes.deps import AdminUser, KubeDep, SessionDep, SettingsDep, WorkerDep
from services.api.settings import Settings
from services.api.store import tenancies as tenancy_store, tokens as token_store
from services.api.worker import push_tenancy

log = logging.getLogger(__name__)
# Documented shape only: any other value names no token (404).
TokenId = Annotated[
    str,
    Path(description="The token's id (tok_...).", json_schema_extra={"pattern": r"^[A-Za-z0-9_]{1,64}$"}),
]
router = APIRouter(prefix="/v1/admin/tenancies", tags=["admin"])


def _public(row: Tenancy, active: int = 0) -> TenancyPublic:
    return TenancyPublic.model_validate(row, update={"active_gpus": active})


def _get(session: SessionDep, name: str) -> Tenancy:
    row = tenancy_store.get_tenancy(session, name=name)
    if row is None:
        raise errors.NotFound(f"tenancy {name!r} not found")
    return row


def _push(session: SessionDep, kube: Kube, row: Tenancy, settings: Settings) -> None:
    """Upsert the custom resource now if Kubernetes answers at once: one try, no backoff (the
    admin's request does not wait out a retry; the worker pushes every tenancy whose resource
    lags its row)."""
    try:
        push_tenancy(kube, settings, row, retry=False)
    except KubeError as exc:
        log.warning("tenancy %s: custom resource not upserted yet (%s)", row.name, exc)
        return
    tenancy_store.mark_pushed(session, name=row.name, revision=row.revision)


@router.post("", status_code=201, response_model=TenancyPublic)
def create_tenancy(
    body: TenancyCreate, session: SessionDep, kube: KubeDep, settings: SettingsDep, _admin: AdminUser
) -> TenancyPublic:
    """Create a tenancy (and its Tenancy custom resource)."""
    row = tenancy_store.create_tenancy(session, data=body)
    _push(session, kube, row, settings)
    return _public(row)


@router.get("", response_model=TenanciesPublic)
def list_tenancies(session: SessionDep, _admin: AdminUser) -> TenanciesPublic:
    """Every tenancy with its GPUs in use."""
    active = tenancy_store.active_gpus_by_tenancy(session)
    rows = tenancy_store.list_tenancies(session)
    return TenanciesPublic(data=[_public(r, active.get(r.name, 0)) for r in rows], count=len(rows))


@router.get("/{name}", response_model=TenancyPublic)
def get_tenancy(name: TenancyName, session: SessionDep, _admin: AdminUser) -> TenancyPublic:
    """One tenancy."""
    row = _get(session, name)
    return _public(row, tenancy_store.active_gpus(session, tenancy=name))


@router.patch("/{name}", response_model=TenancyPublic)
def update_tenancy(
    name: TenancyName,
    body: TenancyUpdate,
    session: SessionDep,
    kube: KubeDep,
    settings: SettingsDep,
    _admin: AdminUser,
) -> TenancyPublic:
    """Change quotas, internet access or storage; the custom resource follows."""
    row = tenancy_store.update_tenancy(session, tenancy=_get(session, name), data=body)
    _push(session, kube, row, settings)
    return _public(row, tenancy_store.active_gpus(session, tenancy=name))


@router.delete("/{name}", status_code=204)
def delete_tenancy(
    name: TenancyName, session: SessionDep, kube: KubeDep, _admin: AdminUser, worker: WorkerDep
) -> Response:
    """Delete the tenancy: its custom resource (the controller deletes its pods, then its
    namespace), its tokens; its active containers are cancelled (the worker deletes
    their pods, freeing GPUs, partitions and leases) and its container records stay as
    history, hidden from a new tenancy of the same name."""
    _get(session, name)
    try:
        kube.delete_tenancy(name)
    except KubeError as exc:
        raise errors.Unavailable(f"cannot delete the Tenancy resource now: {exc}") from exc
    if tenancy_store.delete_tenancy(session, name=name) and worker is not None:
        worker.wake()
    return Response(status_code=204)


@router.post("/{name}/tokens", status_code=201, response_model=TokenIssued)
def issue_token(
    name: TenancyName, session: SessionDep, admin: AdminUser, body: TokenCreate | None = None
) -> TokenIssued:
    """Issue a tenant token bound to this tenancy; the secret is shown only here."""
    _get(session, name)
    body = body or TokenCreate()
    row, secret = token_store.create_token(
        session, tenancy=name, name=body.name, scope=body.scope, expires_at=body.expires_at, actor=admin.actor
    )
    return TokenIssued.model_validate(row, update={"token": secret})


@router.get("/{name}/tokens", response_model=TokensPublic)
def list_tokens(name: TenancyName, session: SessionDep, _admin: AdminUser) -> TokensPublic:
    """The tenancy's tokens (ids and names only)."""
    _get(session, name)
    rows = token_store.list_tokens(session, tenancy=name)
    return TokensPublic(data=[TokenPublic.model_validate(r) for r in rows], count=len(rows))


@router.delete("/{name}/tokens/{token_id}", status_code=204)
def revoke_token(name: TenancyName, token_id: TokenId, session: SessionDep, admin: AdminUser) -> Response:
    """Revoke one of the tenancy's tokens; its next request, on any replica, is refused (401)."""
    _get(session, name)
    if not token_store.delete_token(session, tenancy=name, token_id=token_id, actor=admin.actor):
        raise errors.NotFound(f"token {token_id!r} not found in tenancy {name!r}")
    return Response(status_code=204)
