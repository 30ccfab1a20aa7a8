"""A scratch PostgreSQL database for one run: created on the test server, dropped after.

The server is ``GPUCAAS_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``), the one the tests use; the database
is dropped ``WITH (FORCE)``, so connections a killed process left open do not keep it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

POSTGRES_ADMIN_URL = os.environ.get("GPUCAAS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def scratch_database(prefix: str = "gpucaas_bench") -> Iterator[str]:
    """A fresh database named ``<prefix>_<random>``: yields its URL (password included)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
