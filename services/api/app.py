"""The FastAPI application: wiring of settings, database, Kubernetes, worker and routes.

``create_app`` builds an app whose lifespan migrates the database (``alembic
upgrade head``; or waits for ``gpucaas api migrate`` to have done it), makes sure an
admin token exists, and starts the submission worker; everything it opens it closes on
shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine
from sqlmodel import Session

from core import __version__
from services.api import console
from services.api.db import engines
from services.api.edge import slow_clients
from services.api.edge.limits import Limiter, LimitSettings
from services.api.edge.middleware import Edge, Metrics
from services.api.errors import install_handlers
from services.api.kube import Kube
from services.api.routes import api_router
from services.api.security import revocations
from services.api.security.token_cache import TokenCache
from services.api.settings import Settings
from services.api.store import tenancies as tenancy_store, tokens as token_store
from services.api.usage.metrics import UsageCollector
from services.api.webhooks.dispatcher import WebhookDispatcher
from services.api.worker import SubmissionWorker

log = logging.getLogger(__name__)


def bootstrap(engine: Engine, settings: Settings) -> str | None:
    """Migrate (or, with ``migrate_on_start`` off, wait until the schema is at head), then make
    sure an admin token exists. Returns a newly generated token (to be shown once) when none
    was configured and none existed."""
    if settings.migrate_on_start:
        engines.upgrade(engine)
    else:
        engines.wait_for_schema(engine, settings.schema_wait_seconds)
    with Session(engine) as session:
        tenancy_store.reconcile_gpu_usage(session)  # expected to find nothing (triggers keep it exact)
        if settings.admin_token is not None:
            token_store.ensure_admin_token(session, secret=settings.admin_token.get_secret_value())
            return None
        if token_store.count_admin_tokens(session) > 0:
            return None
        _row, secret = token_store.create_token(session, tenancy=None, name="generated")
    if settings.admin_token_file is not None:
        settings.admin_token_file.parent.mkdir(parents=True, exist_ok=True)
        settings.admin_token_file.touch(mode=0o600)
        settings.admin_token_file.write_text(secret + "\n")
    return secret


def limit_settings(settings: Settings) -> LimitSettings:
    return LimitSettings(
        token_rate=settings.rate_limit_token,
        tenancy_rate=settings.rate_limit_tenancy,
        bad_token_rate=settings.rate_limit_bad_tokens,
        streams_per_token=settings.max_streams_per_token,
        streams_per_tenancy=settings.max_streams_per_tenancy,
        requests_per_client=settings.max_requests_per_client,
        storage_url=settings.rate_limit_storage_url,
    )


def create_app(settings: Settings, *, engine: Engine | None = None) -> FastAPI:
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        eng = engine or engines.make_engine(settings.database_url, pool_size=settings.database_pool_size)
        app.state.engine = eng
        # The worker and the health endpoints get a pool of their own: tenant requests
        # exhausting the request pool cannot stop submissions or fail readiness.
        service_eng = engine or engines.make_engine(settings.database_url, pool_size=settings.service_pool_size)
        app.state.service_engine = service_eng
        app.state.generated_admin_token = await anyio.to_thread.run_sync(bootstrap, eng, settings)
        # PostgreSQL: the submission's admission runs on the event loop (None on SQLite)
        if engines.is_postgres(eng):
            from services.api.db.admission_pool import AdmissionPool

            app.state.admission_pool = AdmissionPool(settings.database_url, max_size=2 * settings.database_pool_size)
            await app.state.admission_pool.open()
        # PostgreSQL: several replicas may serve; each hears revocations before they are answered
        listener = None
        if engines.is_postgres(eng) and settings.token_cache_seconds > 0:
            listener = revocations.Listener(eng.url.render_as_string(hide_password=False), app.state.token_cache)
            listener.start()
        app.state.revocation_listener = listener
        app.state.kube = Kube(settings.kubeconfig, timeout=settings.kube_timeout_seconds)
        worker = None
        if settings.run_worker:
            worker = SubmissionWorker(engine=service_eng, kube=app.state.kube, settings=settings)
            worker.start()
        app.state.worker = worker
        dispatcher = WebhookDispatcher(engine=service_eng, kube=app.state.kube, settings=settings)
        if settings.run_worker:
            dispatcher.start()
        app.state.webhook_dispatcher = dispatcher
        log.info(
            "gpucaas api ready (database %s; rates counted %s)",
            eng.dialect.name,
            "in the shared storage" if settings.rate_limit_storage_url else "in this replica alone",
        )
        try:
            yield
        finally:
            if worker is not None:
                await anyio.to_thread.run_sync(worker.stop)
            await anyio.to_thread.run_sync(dispatcher.stop)
            if listener is not None:
                await anyio.to_thread.run_sync(listener.stop)
            app.state.kube.close()
            if app.state.admission_pool is not None:
                await app.state.admission_pool.close()
            await app.state.limiter.close()
            if engine is None:
                eng.dispose()
                service_eng.dispose()

    # Swagger UI and ReDoc from the fastapi-offline package's own copies (no CDN): /docs
    # and /redoc work on air-gapped clusters and in the sandbox without internet.
    app = FastAPIOffline(
        title="gpucaas API",
        version=__version__,
        description="GPU containers as a service: submit containers with 1-8 GPUs; admins manage tenancies.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    metrics.registry.register(UsageCollector(lambda: getattr(app.state, "service_engine", None)))
    app.state.worker = None
    app.state.admission_pool = None
    app.state.revocation_listener = None
    app.state.limiter = limiter = Limiter(limit_settings(settings), registry=metrics.registry)
    app.state.token_cache = TokenCache(settings.token_cache_seconds)
    install_handlers(app)
    app.include_router(api_router)
    console.install(app)  # the web console's static files under /console/
    app.add_middleware(
        Edge,
        max_body_bytes=settings.max_body_bytes,
        metrics=metrics,
        limiter=limiter,
        body_timeout=settings.body_timeout_seconds,
    )
    return app


def uvicorn_config(app: Any, settings: Settings, **overrides: Any) -> Any:
    """The uvicorn configuration for ``app`` (TLS when a cert/key pair is set)."""
    import uvicorn

    kwargs: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "lifespan": "on",
        # long-lived log follows must not hold a shutdown (or a restart) forever
        "timeout_graceful_shutdown": 10,
        # slow clients: a head not complete in time closes the connection
        "http": slow_clients.protocol_class(settings.header_timeout_seconds),
        # wsproto, not the default websockets-sansio: the exec endpoint refuses a handshake with
        # a JSON denial response (401/403/404), and websockets-sansio then logs an ERROR
        # "ASGI callable returned without completing handshake" for every refusal
        # (Kludex/uvicorn#3138); wsproto marks the denial as the handshake's end.
        "ws": "wsproto",
    }
    if settings.tls_cert is not None and settings.tls_key is not None:
        kwargs["ssl_certfile"] = str(settings.tls_cert)
        kwargs["ssl_keyfile"] = str(settings.tls_key)
    kwargs.update(overrides)
    return uvicorn.Config(app, **kwargs)
