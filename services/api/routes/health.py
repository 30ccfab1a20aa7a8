"""Liveness, readiness (database and Kubernetes reachable) and Prometheus metrics.

Readiness lists tenancies (limit 1): a call the API's ClusterRole grants, so a
ready API can do its job; a 403 reads "forbidden: <user> cannot <verb> <resource>",
no answer reads "Kubernetes unreachable at <url>".
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlmodel import Session

from core.kube import KubeError
from services.api.store import worker_state

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


def _check_db(request: Request) -> str | None:
    try:
        with Session(request.app.state.service_engine) as session:
            session.exec(text("SELECT 1"))  # type: ignore[call-overload]
        return None
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"{exc.__class__.__name__}: {exc}"


def _check_kube(request: Request) -> str | None:
    try:
        request.app.state.kube.ping()
        return None
    except KubeError as exc:  # "forbidden: <user> cannot <verb> <resource>" or "Kubernetes unreachable at <url>"
        return exc.summary()


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready when the database and the Kubernetes API both answer (503 otherwise)."""
    db_error = await anyio.to_thread.run_sync(_check_db, request)
    kube_error = await anyio.to_thread.run_sync(_check_kube, request)
    body = {"database": db_error or "ok", "kubernetes": kube_error or "ok"}
    ok = db_error is None and kube_error is None
    return JSONResponse({"status": "ok" if ok else "unavailable", **body}, status_code=200 if ok else 503)


def _refresh_gauges(request: Request) -> None:
    metrics = request.app.state.metrics
    try:
        with Session(request.app.state.service_engine) as session:
            metrics.queued.set(worker_state.queue_depth(session))
            metrics.oldest_queued.set(worker_state.oldest_queued_age(session))
    except Exception:  # noqa: BLE001 - metrics must not fail on a DB hiccup
        pass
    worker = request.app.state.worker
    if worker is not None:
        metrics.pods_created.set(worker.submitted)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics (text exposition format)."""
    await anyio.to_thread.run_sync(_refresh_gauges, request)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
