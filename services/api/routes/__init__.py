"""HTTP routes, one router per resource; ``api_router`` gathers them."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.routes import cluster, container_events, containers, gpus, health, registry_credentials, secrets, tenancies

api_router = APIRouter()
api_router.include_router(health.router)
api_router.include_router(containers.router)
api_router.include_router(container_events.router)
api_router.include_router(containers.admin_router)
api_router.include_router(tenancies.router)
api_router.include_router(cluster.router)
api_router.include_router(gpus.router)
api_router.include_router(secrets.router)
api_router.include_router(registry_credentials.router)
