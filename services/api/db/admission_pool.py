"""The submission's statements on psycopg's own asyncio pool (PostgreSQL only).

A tenant's ``POST /v1/containers`` runs on the event loop (``store.admission.submit_container_async``).
Through SQLAlchemy's ``AsyncEngine`` its one statement cost about 0.4 ms of CPU beyond
the statement itself — a greenlet per call, the pool's checkout machinery, the execution
context: a third of the route, which ran at 800/s where psycopg's pool
(``psycopg_pool.AsyncConnectionPool``) serves 1,180/s on the same machine
(docs/api-performance.md). The statements stay SQLAlchemy's: the admission and the
idempotency lookup are ``store.admission``'s Core statements, compiled once for psycopg; JSON columns
are bound as psycopg ``Json`` (what SQLAlchemy's JSON type sends), every other value as is.

Errors keep SQLAlchemy's types, so callers and the error handlers see one tree: a unique
violation is ``sqlalchemy.exc.IntegrityError``; a lost or refused connection is
``OperationalError``/``InterfaceError`` (503 with ``Retry-After``, ``services.api.errors``).
Connections that sat idle for ``idle_ping_s`` are pinged when taken (psycopg_pool's
``check``) and replaced if dead; after a statement fails on a dead connection, every idle
connection is checked before the error goes out (``AsyncConnectionPool.check``), so a
restarted server costs one request, not one per pooled connection — as SQLAlchemy's pool
does for the rest of the API (``services.api.db.engines.ping_when_idle``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import Json
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import JSON, exc
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from services.api.db.engines import IDLE_PING_SECONDS, normalize_url

log = logging.getLogger(__name__)


class _Connection(psycopg.AsyncConnection[Any]):
    """A pooled connection that remembers when it was last given back."""

    returned_at: float | None = None


class AdmissionPool:
    """``execute`` compiled Core statements on a pool of autocommit psycopg connections."""

    def __init__(self, url: str, *, max_size: int, idle_ping_s: float = IDLE_PING_SECONDS) -> None:
        conninfo = make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)
        self._idle_ping_s = idle_ping_s
        self._pool = AsyncConnectionPool(
            conninfo,
            connection_class=_Connection,
            kwargs={"autocommit": True, "row_factory": namedtuple_row},
            min_size=1,
            max_size=max_size,
            open=False,
            check=self._check,
            reset=self._returned,
            name="gpucaas-admission",
        )
        self._compiled: dict[int, tuple[str, frozenset[str]]] = {}

    async def open(self) -> None:
        await self._pool.open()

    async def close(self) -> None:
        await self._pool.close()

    async def _returned(self, conn: _Connection) -> None:
        conn.returned_at = time.monotonic()

    async def _check(self, conn: _Connection) -> None:
        """Ping a connection that sat idle (psycopg_pool discards it if this raises)."""
        if conn.returned_at is not None and time.monotonic() - conn.returned_at >= self._idle_ping_s:
            await conn.execute("")

    def _sql(self, statement: Any) -> tuple[str, frozenset[str]]:
        """The statement's SQL for psycopg (``%(name)s`` parameters), and its JSON parameters."""
        found = self._compiled.get(id(statement))
        if found is None:
            compiled = statement.compile(dialect=postgresql.psycopg.dialect())
            json_params = frozenset(name for name, bind in compiled.binds.items() if isinstance(bind.type, JSON))
            found = self._compiled[id(statement)] = (str(compiled), json_params)
        return found

    async def first(self, statement: Any, params: Mapping[str, Any]) -> Any:
        """The first row of ``statement`` (a Core statement built once), or None."""
        sql, json_params = self._sql(statement)
        bound = {k: Json(v) if k in json_params and v is not None else v for k, v in params.items()}
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql, bound)
                return await cur.fetchone()
        except psycopg.IntegrityError as err:
            raise exc.IntegrityError(sql, None, err) from err
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            # the statement's connection is gone (the pool drops it on return): look at the
            # others before answering, so that only this request pays for a restart
            log.warning("database connection lost (%s): checking the admission pool", err)
            try:
                await self._pool.check()
            except Exception:  # the request's answer is the error below
                log.exception("admission pool check failed")
            kind = exc.OperationalError if isinstance(err, psycopg.OperationalError) else exc.InterfaceError
            raise kind(sql, None, err) from err
