"""Entry module of ``gpucaas api``: load settings, configure logging, wire, run — only."""

from __future__ import annotations

import gc
import logging
import sys

from services.api.settings import Settings


def run(settings: Settings) -> None:
    import uvicorn

    from services.api.app import bootstrap, create_app, uvicorn_config
    from services.api.db import engines

    log = logging.getLogger("services.api")
    log.info("configuration: %s", settings.redacted())
    engine = engines.make_engine(settings.database_url, pool_size=settings.database_pool_size)
    generated = bootstrap(engine, settings)
    if generated is not None:
        # The one time this secret is shown (stored only hashed).
        print(f"gpucaas api: generated admin token (shown once): {generated}", file=sys.stderr, flush=True)
        if settings.admin_token_file is not None:
            print(f"gpucaas api: admin token also written to {settings.admin_token_file}", file=sys.stderr)
    app = create_app(settings, engine=engine)
    # Everything loaded so far (modules, models, routes, compiled statements: ~150,000
    # objects) lives as long as the process: out of the collector's sight, a full
    # collection scans only what requests allocate (it took ~50 ms, a tail-latency spike
    # under load, when it scanned them all; docs/api-performance.md).
    gc.freeze()
    scheme = "https" if settings.tls_cert else "http"
    log.info("serving on %s://%s:%s", scheme, settings.host, settings.port)
    try:
        uvicorn.Server(uvicorn_config(app, settings)).run()
    finally:
        engine.dispose()
