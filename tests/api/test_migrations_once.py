"""The schema is migrated once however many migrators start together (the database's migration
lock: PostgreSQL's advisory lock, SQLite's write lock), by ``gpucaas api migrate``; an API that
does not migrate (``migrate_on_start`` off, as the chart runs it) waits for the schema instead."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from sqlalchemy import text

from devtools.waiting import wait_for
from services.api.app import bootstrap
from services.api.db import engines
from services.api.settings import Settings


def _revision(url: str) -> str | None:
    engine = engines.make_engine(url)
    try:
        with engine.connect() as conn:
            return engines.current_revision(conn)
    finally:
        engine.dispose()


def _waiting_on_the_lock(url: str, caplog: pytest.LogCaptureFixture) -> int:
    """Migrators blocked on the lock: PostgreSQL lists them (pg_locks); SQLite does not, so there
    it is those that said they were taking it (the next thing each does)."""
    if not url.startswith("postgresql"):
        return sum(r.getMessage().startswith("taking the database's migration lock") for r in caplog.records)
    engine = engines.make_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_two_migrations_at_once_run_once(empty_database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Both migrators start while the lock is held; when it is let go one migrates from nothing,
    the other waits for it and finds the schema at head (without the lock the second's CREATE
    TABLE fails on the first's)."""
    caplog.set_level(logging.INFO, logger="services.api.db")
    results: list[engines.Migration] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        engine = engines.make_engine(empty_database_url)
        try:
            results.append(engines.upgrade(engine))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            engine.dispose()

    holder_engine = engines.make_engine(empty_database_url)
    threads = [threading.Thread(target=migrate) for _ in range(2)]
    try:
        with holder_engine.connect() as holder:
            engines.take_migration_lock(holder)
            for t in threads:
                t.start()
            wait_for(lambda: _waiting_on_the_lock(empty_database_url, caplog) == 2, 60, what="both migrators waiting")
            assert results == [] and errors == []
            holder.rollback()  # lets go of the lock
        for t in threads:
            t.join(timeout=120)
    finally:
        holder_engine.dispose()
    assert errors == []
    head = engines.head_revision()
    assert sorted(results, key=lambda m: m.ran) == [engines.Migration(head, head), engines.Migration(None, head)]
    assert _revision(empty_database_url) == head


def test_gpucaas_api_migrate_brings_the_schema_to_head(empty_sqlite_url: str) -> None:
    """The command the chart's hook Job runs, as a process: it migrates, and again finds head."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env |= {"GPUCAAS_DATABASE_URL": empty_sqlite_url, "GPUCAAS_LOG_FORMAT": "text"}
    for expected in ("migrated from None to head", "already at head"):
        run = subprocess.run(
            [sys.executable, "-m", "gpucaas", "api", "migrate"], env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        assert expected in run.stderr
        assert _revision(empty_sqlite_url) == engines.head_revision()


def _at(url: str, revision: str) -> None:
    """The schema at ``revision``: a known older one, or one this release does not know."""
    from alembic import command

    engine = engines.make_engine(url)
    try:
        with engine.begin() as conn:
            if revision in {s.revision for s in _scripts()}:
                cfg = engines._alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
            else:
                conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


def _scripts() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(engines._alembic_config()).walk_revisions()


def test_an_api_that_does_not_migrate_serves_only_a_schema_at_head(empty_sqlite_url: str, sqlite_url: str) -> None:
    """At head, or newer (a later release's expand step: served, the rule says it is compatible);
    an empty or older schema is waited for, and the start-up gives up after its time."""
    settings = Settings(database_url=empty_sqlite_url, migrate_on_start=False, schema_wait_seconds=0.2)
    engine = engines.make_engine(empty_sqlite_url)
    try:
        with pytest.raises(engines.SchemaNotReady, match="gpucaas api migrate"):
            bootstrap(engine, settings)
        assert _revision(empty_sqlite_url) is None  # it did not migrate
        head = engines.head_revision()
        previous = next(s.down_revision for s in _scripts() if s.revision == head)
        _at(empty_sqlite_url, previous)
        assert not engines.schema_is_ready(engine)
    finally:
        engine.dispose()

    ready = engines.make_engine(sqlite_url)
    try:
        assert engines.schema_is_ready(ready)
        assert bootstrap(ready, settings.model_copy(update={"database_url": sqlite_url})) is not None
        _at(sqlite_url, "9999_from_a_later_release")
        assert engines.schema_is_ready(ready)
    finally:
        ready.dispose()
