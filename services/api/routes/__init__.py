"""HTTP routes, one router per resource; ``api_router`` gathers them.

Beside the routers, what they share: the request dependencies (``deps``: ``Annotated``
aliases for the session, the caller and the adapters), the tenancy a request acts on
(``tenant_scope``) and keyset page cursors (``pagination``).

Every operation documents the error responses it may give with the one error
model (``errors.ErrorBody``: ``{code, detail}``), 422 included, so the OpenAPI
schema says what the server sends.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.api.errors import ERROR_RESPONSES
from services.api.routes import (
    audit,
    cluster,
    container_events,
    container_exec,
    containers,
    endpoint_auth,
    gpus,
    health,
    registry_credentials,
    secrets,
    tenancies,
    tokens,
    usage,
    volumes,
    warm_images,
    webhooks,
    whoami,
)

# What the edge may answer on any path, before a route runs.
EDGE_RESPONSES: dict[int | str, dict[str, Any]] = {code: ERROR_RESPONSES[code] for code in (400, 413, 429)}

api_router = APIRouter()
api_router.include_router(health.router, responses=EDGE_RESPONSES)
for _router in (
    containers.router,
    container_events.router,
    container_exec.router,
    containers.admin_router,
    tenancies.router,
    cluster.router,
    gpus.router,
    warm_images.router,
    secrets.router,
    registry_credentials.router,
    webhooks.router,
    volumes.router,
    tokens.router,
    whoami.router,
    audit.router,
    usage.router,
    usage.admin_router,
    endpoint_auth.router,
):
    api_router.include_router(_router, responses=ERROR_RESPONSES)
