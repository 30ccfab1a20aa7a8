"""Database adapter: engine construction and schema migration (Alembic).

SQLite (the default, a local file) gets WAL and a busy timeout so the API's
request threads and the worker can share it, and its writers take turns on a lock in this
process (``sqlite_writer``) rather than in SQLite's polling busy handler; PostgreSQL is
reached with psycopg 3.
The schema is only ever created by ``alembic upgrade head``, under the database's migration
lock (:func:`upgrade`): by ``gpucaas api migrate`` (the chart's pre-install/pre-upgrade hook
Job), or by the API at start-up where ``migrate_on_start`` is on (the sandbox, development).
An API that does not migrate waits until the schema is at its head (:func:`wait_for_schema`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text
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


#: The PostgreSQL advisory lock of schema migrations (one 64-bit key per database;
#: ``pg_advisory_xact_lock``, released when the migration's transaction ends).
MIGRATION_LOCK_KEY = 0x67707563_6D696772  # "gpucmigr"


@dataclass(frozen=True)
class Migration:
    """The schema's revision before and after one :func:`upgrade`."""

    before: str | None
    after: str | None

    @property
    def ran(self) -> bool:
        return self.before != self.after


def _alembic_config() -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    return cfg


def head_revision() -> str | None:
    """The newest migration this release has."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(conn: Connection) -> str | None:
    """The revision the database's schema is at (None: no schema yet)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def take_migration_lock(conn: Connection) -> None:
    """Hold the database's migration lock until ``conn``'s transaction ends: PostgreSQL's
    transaction-level advisory lock; on SQLite its write lock (``BEGIN IMMEDIATE``), which
    another process's ``BEGIN IMMEDIATE`` waits for (the busy timeout) and this process's
    writers queue behind (``sqlite_writer``)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def upgrade(engine: Engine) -> Migration:
    """Bring the schema to the newest migration (``alembic upgrade head``), once however many
    processes ask at the same time: each takes the migration lock first and reads the
    revision under it, so the first migrates and the others wait, then find the schema at head."""
    from alembic import command

    cfg = _alembic_config()
    with engine.connect() as conn:
        log.info("taking the database's migration lock (%s)", engine.dialect.name)
        take_migration_lock(conn)
        before = current_revision(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        after = current_revision(conn)
        conn.commit()
    if before == after:
        log.info("database schema already at head %s (%s)", after, engine.dialect.name)
    else:
        log.info("database schema migrated from %s to head %s (%s)", before, after, engine.dialect.name)
    return Migration(before, after)


class SchemaNotReady(RuntimeError):
    """The schema did not reach this release's head in time (nobody ran the migrations)."""


def schema_is_ready(engine: Engine, head: str | None = None) -> bool:
    """The schema is at this release's head, or at a revision this release does not know: a
    newer release's, which it serves under the expand/contract rule (docs/deploy.md)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    head = head or head_revision()
    with engine.connect() as conn:
        current = current_revision(conn)
    if current == head:
        return True
    if current is None:
        return False
    try:
        ScriptDirectory.from_config(_alembic_config()).get_revision(current)
    except CommandError:
        log.warning("database schema at %s, newer than this release's head %s: serving it", current, head)
        return True
    return False


def wait_for_schema(engine: Engine, timeout_s: float, poll_s: float = 2.0) -> None:
    """Return once :func:`schema_is_ready`; :class:`SchemaNotReady` after ``timeout_s``."""
    head = head_revision()
    deadline = time.monotonic() + timeout_s
    while not schema_is_ready(engine, head):
        if time.monotonic() >= deadline:
            raise SchemaNotReady(
                f"the database schema is not at {head} after {timeout_s:.0f}s: run `gpucaas api migrate` "
                "(the chart's migration hook Job), or set migrate_on_start"
            )
        log.info("waiting for the database schema to reach %s (`gpucaas api migrate`)", head)
        time.sleep(poll_s)
