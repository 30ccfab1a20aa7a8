"""Webhooks: a tenancy's endpoints, told of its containers' status changes (docs/webhooks.md).

The signing secret is shown once, in the answer to ``POST /v1/webhooks``; it is kept in
a Kubernetes Secret in the tenant namespace (``webhooks.secret_store``), never in the
database, never returned again. Every route acts on the caller's tenancy only (an admin
names one with ``?tenancy=``): another tenancy's webhook is answered like a missing one.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response

from core import crds
from core.kube import KubeError
from services.api import errors
from services.api.domain.models import AuditAction
from services.api.routes import tenant_scope
from services.api.routes.deps import CurrentTenant, KubeDep, SessionDep, SettingsDep
from services.api.routes.secrets import TenancyQuery, write
from services.api.store import audit
from services.api.webhooks import secret_store, signing, ssrf, store
from services.api.webhooks.models import (
    WEBHOOKS_PER_TENANCY,
    DeliveriesPublic,
    DeliveryPublic,
    Webhook,
    WebhookCreate,
    WebhookCreated,
    WebhookPublic,
    WebhooksPublic,
    delivery_public,
)

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

# Ids are a prefix and lowercase hex (security.bearer.new_id). The schema says so; any other value
# simply names no webhook (404, like another tenancy's id), so it is not validated here.
_ID_SCHEMA = {"pattern": r"^[a-z0-9_]{1,64}$", "maxLength": 64}
WebhookIdPath = Annotated[str, Path(description="The webhook's id (wh_...).", json_schema_extra=_ID_SCHEMA)]
DeliveryIdPath = Annotated[str, Path(description="The delivery's id (whd_...).", json_schema_extra=_ID_SCHEMA)]


def _public(row: object) -> WebhookPublic:
    return WebhookPublic.model_validate(row, from_attributes=True)


def _found(session: SessionDep, tenancy: str, webhook_id: str) -> Webhook:
    row = store.get(session, tenancy=tenancy, webhook_id=webhook_id)
    if row is None:
        raise errors.NotFound(f"webhook {webhook_id!r} not found")
    return row


@router.post("", status_code=201, response_model=WebhookCreated)
def create_webhook(
    body: WebhookCreate,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    settings: SettingsDep,
    tenancy: TenancyQuery = None,
) -> WebhookCreated:
    """Register an endpoint; the answer carries its signing secret, shown this once."""
    name = tenant_scope.resolve(session, caller, tenancy)
    try:
        ssrf.check_registration(
            body.url, allow_loopback=settings.webhook_allow_loopback, networks=settings.webhook_allow_networks
        )
    except ssrf.Refused as exc:
        raise errors.Invalid(f"url: {exc}") from None
    if store.count(session, tenancy=name) >= WEBHOOKS_PER_TENANCY:
        raise errors.Conflict(
            f"tenancy {name!r} has {WEBHOOKS_PER_TENANCY} webhooks, the most allowed; "
            "delete one first (DELETE /v1/webhooks/{id})"
        )
    webhook_id = store.new_id()
    secret = signing.new_secret()
    write(
        kube,
        secret_store.build(tenancy=name, webhook_id=webhook_id, secret=secret),
        replace=False,
        what="webhook signing secret",
        tenancy=name,
    )
    try:
        audit.record(
            session,
            caller.actor,
            tenancy=name,
            action=AuditAction.WEBHOOK_CREATE,
            target=webhook_id,
            detail=f"events {', '.join(body.events)}",
        )
        row = store.create(session, tenancy=name, data=body, webhook_id=webhook_id)  # commits the event too
    except Exception:
        _delete_secret(kube, name, webhook_id)
        raise
    return WebhookCreated(**_public(row).model_dump(), secret=secret)


@router.get("", response_model=WebhooksPublic)
def list_webhooks(session: SessionDep, caller: CurrentTenant, tenancy: TenancyQuery = None) -> WebhooksPublic:
    """The tenancy's webhooks (never their secrets)."""
    rows = store.list_for(session, tenancy=tenant_scope.resolve(session, caller, tenancy))
    return WebhooksPublic(data=[_public(r) for r in rows], count=len(rows))


@router.get("/{webhook_id}", response_model=WebhookPublic)
def get_webhook(
    webhook_id: WebhookIdPath, session: SessionDep, caller: CurrentTenant, tenancy: TenancyQuery = None
) -> WebhookPublic:
    """One webhook (never its secret)."""
    return _public(_found(session, tenant_scope.resolve(session, caller, tenancy), webhook_id))


def _delete_secret(kube: KubeDep, tenancy: str, webhook_id: str) -> None:
    try:
        kube.delete_secret(crds.tenant_namespace(tenancy), secret_store.object_name(webhook_id))
    except KubeError as exc:  # the namespace's deletion takes it at the latest; it signs nothing any more
        log.warning("webhook %s: its signing secret stays until Kubernetes answers: %s", webhook_id, exc)


@router.delete("/{webhook_id}", status_code=204)
def delete_webhook(
    webhook_id: WebhookIdPath,
    request: Request,
    session: SessionDep,
    caller: CurrentTenant,
    kube: KubeDep,
    tenancy: TenancyQuery = None,
) -> Response:
    """Delete a webhook, its pending deliveries and its delivery log."""
    name = tenant_scope.resolve(session, caller, tenancy)
    audit.record(session, caller.actor, tenancy=name, action=AuditAction.WEBHOOK_DELETE, target=webhook_id)
    if not store.remove(session, tenancy=name, webhook_id=webhook_id):  # commits the event with the delete
        session.rollback()
        raise errors.NotFound(f"webhook {webhook_id!r} not found")
    _delete_secret(kube, name, webhook_id)
    dispatcher = getattr(request.app.state, "webhook_dispatcher", None)
    if dispatcher is not None:
        dispatcher.secrets.forget(webhook_id)
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=DeliveriesPublic)
def list_deliveries(
    webhook_id: WebhookIdPath,
    session: SessionDep,
    caller: CurrentTenant,
    settings: SettingsDep,
    status: Annotated[Literal["pending", "delivered", "failed"] | None, Query(description="Only these.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    tenancy: TenancyQuery = None,
) -> DeliveriesPublic:
    """The webhook's deliveries, newest first, each with its latest attempts (status code,
    error, duration, next attempt)."""
    hook = _found(session, tenant_scope.resolve(session, caller, tenancy), webhook_id)
    rows, attempts, total = store.deliveries(session, webhook_id=hook.id, status=status, limit=limit, offset=offset)
    window = timedelta(hours=settings.webhook_retry_hours)
    return DeliveriesPublic(data=[delivery_public(r, attempts[r.id], window=window) for r in rows], count=total)


@router.post("/{webhook_id}/deliveries/{delivery_id}/resend", status_code=202, response_model=DeliveryPublic)
def resend_delivery(
    webhook_id: WebhookIdPath,
    delivery_id: DeliveryIdPath,
    request: Request,
    session: SessionDep,
    caller: CurrentTenant,
    settings: SettingsDep,
    tenancy: TenancyQuery = None,
) -> DeliveryPublic:
    """Send a delivery again now (same event id and body), with a fresh retry window."""
    hook = _found(session, tenant_scope.resolve(session, caller, tenancy), webhook_id)
    row = store.get_delivery(session, webhook_id=hook.id, delivery_id=delivery_id)
    if row is None:
        raise errors.NotFound(f"delivery {delivery_id!r} not found")
    audit.record(
        session,
        caller.actor,
        tenancy=hook.tenancy,
        action=AuditAction.WEBHOOK_RESEND,
        target=hook.id,
        detail=f"delivery {row.id}",
    )
    row = store.resend(session, delivery=row)  # commits the event with the resend
    dispatcher = getattr(request.app.state, "webhook_dispatcher", None)
    if dispatcher is not None:
        dispatcher.wake()
    window = timedelta(hours=settings.webhook_retry_hours)
    return delivery_public(row, store.attempts_of(session, [row.id])[row.id], window=window)
