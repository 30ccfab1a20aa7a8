"""Alembic environment: migrations run on the connection the API hands over
(``config.attributes["connection"]``), or on ``sqlalchemy.url`` / ``GPUCAAS_DATABASE_URL``
when run from the alembic command line."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

target_metadata = None


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from services.api.db.engines import normalize_url
    from services.api.settings import get_settings

    url = context.config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        _run(conn)
