"""Which database a session talks to: some statements differ on PostgreSQL (row locks,
data-modifying CTEs) and on SQLite (one writer at a time, naive UTC timestamps)."""

from __future__ import annotations

from sqlmodel import Session


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"
