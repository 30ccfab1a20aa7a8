"""Database adapter: engine construction and schema migration (Alembic, run at start-up).

SQLite (the default, a local file) gets WAL and a busy timeout so the API's
request threads and the worker can share it, and its writers take turns on a lock in this
process (``sqlite_writer``) rather than in SQLite's polling busy handler; PostgreSQL is
reached with psycopg 3.
The schema is only ever created by ``alembic upgrade head``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import make_url

from services.api.db import sqlite_writer

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parents[1] / "migrations"
SQLITE_TIMEOUT_S = 30.0


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and select the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": SQLITE_TIMEOUT_S}
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            connect_args["factory"] = sqlite_writer.connection_factory(parsed.database, timeout=SQLITE_TIMEOUT_S)
        engine = create_engine(url, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(SQLITE_TIMEOUT_S * 1000)}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_use_lifo=True)
    ping_when_idle(engine)
    return engine


IDLE_PING_SECONDS = 5.0


def ping_when_idle(engine: Engine, idle_seconds: float = IDLE_PING_SECONDS) -> None:
    """Pessimistic disconnect handling for connections that sat in the pool for
    ``idle_seconds`` or more: they are pinged on checkout, and a dead one is replaced
    (a checkout listener raising ``DisconnectionError`` makes the pool discard the
    connection and take another: SQLAlchemy's "Dealing with Disconnects" guide).

    ``pool_pre_ping`` pings on every checkout; on the submission path that second round
    trip was a fifth of the API's CPU per request. A connection in steady use comes
    back within milliseconds and is not pinged; one that died in use fails its
    statement, SQLAlchemy then invalidates every older connection of the pool, and the
    API answers 503 (``services.api.errors``). The pool is LIFO so that the idle
    surplus is what ages, not every connection in turn.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("checked_in")
        if since is None or time.monotonic() - since < idle_seconds:
            return  # fresh from connect(), or in steady use
        try:
            engine.dialect.do_ping(dbapi_conn)  # the dialect's own ping (autocommit, SELECT 1)
        except Exception as err:
            raise exc.DisconnectionError(f"connection idle for {time.monotonic() - since:.0f}s is gone") from err


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (``alembic upgrade head``)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    log.info("database schema at head (%s)", engine.dialect.name)
