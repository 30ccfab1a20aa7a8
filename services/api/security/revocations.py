"""Token revocations that hold on the next request, on every API replica.

Each replica remembers verified tokens for a few seconds (``services.api.security.token_cache``)
so that most requests make no token query. A revocation — a token revoked, a tenancy
deleted — must reach every replica's cache before it is answered, not within the cache
time. On PostgreSQL (SQLite is one replica: it forgets in-process, and that is all):

1. The revoking transaction bumps ``revocation_epoch`` (one row, locked until the
   commit, so epochs follow commit order) and sends
   ``NOTIFY gpucaas_token_revocations, '<epoch> <token id> <tenancy>'``, which PostgreSQL
   delivers at the commit, to every listener (:func:`announce`).
2. Every replica keeps one connection listening (:class:`Listener`). A notification
   makes it forget the token (or the tenancy's tokens) in its cache, then acknowledge:
   ``revocation_listener.heard = <epoch>`` in its own row.
3. After the commit the revoking request waits until every replica with a live lease has
   heard the epoch (:func:`wait_heard`), then answers. The next request, on any replica,
   finds no entry, asks the database and is answered 401.

Leases keep a replica that cannot hear from serving a revoked token. Its listener renews
its row's ``lease_until`` (database clock) every ``heartbeat`` seconds; its cache serves
entries only until ``LOCAL_SHARE`` of the lease after the renewal was *sent* (its own
monotonic clock), so it stops serving from the cache before the database considers the
lease over. A revocation waits for a replica whose listener lost its connection, hangs
or died at most until its lease ends (``LEASE_SECONDS``); by then that replica asks the
database on every request. A listener that reconnects empties its cache before it
acknowledges what it missed. A replica that stops cleanly deletes its row; one that
crashed costs revocations that wait until its lease ends (10 s), once.

Why this design (measured with ``python -m benchmarks.revocations``, PostgreSQL on
localhost, this 2-core machine, two runs; docs/api-performance.md#tokens):

* **A query per request** (the token row, or an epoch row: the same round trip) is exact
  without any of this, but every request pays it: 89–103 µs, of which 86–89 µs of the
  API's own CPU on psycopg's asyncio pool, where a cache hit costs 0.3 µs — about a tenth
  of a submission's whole cost (0.85–0.99 ms of server CPU, ``benchmarks.api``), on the
  path the admission work made one statement long.
* **LISTEN/NOTIFY alone** costs nothing per request, but the notification races the
  client's next request: between the commit and the other replica reading its socket, a
  request there may still be served from its cache (rarely, but nothing bounds it under
  load).
* **NOTIFY with acknowledgements and leases** (this) costs nothing per request and keeps
  the guarantee. A revocation — rare — waits for the acknowledgements: 1.6–1.7 ms at the
  median, 3.8–4.1 ms at p99 with two replicas listening; a heartbeat is one small
  ``UPDATE`` per replica every 2 s.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlmodel import Session

from core.backoff import Backoff
from services.api.security import bearer
from services.api.security.token_cache import TokenCache

log = logging.getLogger(__name__)

CHANNEL = "gpucaas_token_revocations"
LEASE_SECONDS = 10.0
HEARTBEAT_SECONDS = 2.0
#: the share of the lease a replica serves from its cache after sending a renewal
LOCAL_SHARE = 0.8
#: how long a listener waits for notifications before it looks at its stop flag
_POLL_SECONDS = 0.25

_NEXT_EPOCH = text("UPDATE revocation_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_NOT_HEARD = text("SELECT replica FROM revocation_listener WHERE heard < :epoch AND lease_until > clock_timestamp()")


def is_postgres(session_or_engine: Session | Engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def announce(session: Session, *, token_id: str | None = None, tenancy: str | None = None) -> int | None:
    """In the caller's transaction: the next epoch, and the notification every replica
    receives at the commit. None on SQLite (one replica: nobody else to tell)."""
    if not is_postgres(session):
        return None
    epoch = int(session.execute(_NEXT_EPOCH).scalar_one())
    session.execute(_NOTIFY, {"channel": CHANNEL, "payload": f"{epoch} {token_id or '-'} {tenancy or '-'}"})
    return epoch


def wait_heard(engine: Engine, epoch: int | None, *, timeout: float = LEASE_SECONDS + 2.0) -> bool:
    """After the commit: wait until every replica with a live lease has heard ``epoch``
    (an acknowledgement takes a few milliseconds; a replica that cannot hear is waited
    for until its lease ends). False, logged, if some replica still has not at ``timeout``."""
    if epoch is None:
        return True
    deadline = time.monotonic() + timeout
    polls = Backoff(0.001, 0.05)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        while True:
            waiting = conn.execute(_NOT_HEARD, {"epoch": epoch}).scalars().all()
            if not waiting:
                return True
            if time.monotonic() >= deadline:
                log.warning(
                    "revocation %d not acknowledged by replica(s) %s within %.0f s", epoch, ", ".join(waiting), timeout
                )
                return False
            time.sleep(polls.next())


def _parse(payload: str) -> tuple[int, str | None, str | None]:
    epoch, token_id, tenancy = payload.split(" ")
    return int(epoch), None if token_id == "-" else token_id, None if tenancy == "-" else tenancy


def replica_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{bearer.new_id(nbytes=3)}"[-64:]


class Listener:
    """One replica's ear: a thread with one autocommit connection that listens for
    revocations, applies them to ``cache``, acknowledges them and renews its lease."""

    def __init__(
        self,
        database_url: str,
        cache: TokenCache,
        *,
        replica: str | None = None,
        lease: float = LEASE_SECONDS,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> None:
        from services.api.db.engines import normalize_url

        url = make_url(normalize_url(database_url)).set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self.cache = cache
        self.replica = replica or replica_name()
        self.lease = lease
        self.heartbeat = heartbeat
        self.listening = threading.Event()  # registered: the cache serves entries
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Listener:
        self.cache.suspend()
        self._thread = threading.Thread(target=self._run, name="token-revocations", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        backoff = Backoff(0.2, 5.0)
        while not self._stop.is_set():
            try:
                self._listen()
                backoff.reset()
            except Exception as exc:  # noqa: BLE001 - the connection went: reconnect
                # The cache keeps serving until the lease it holds runs out (a revocation
                # meanwhile waits for that, or for the acknowledgement after reconnecting);
                # then every request asks the database until the listener is back.
                self.listening.clear()
                log.warning("token revocations: not listening (%s); reconnecting", exc)
                self._stop.wait(backoff.next())
        self.cache.suspend()

    def _listen(self) -> None:
        import psycopg

        with psycopg.connect(self._conninfo, autocommit=True, application_name="gpucaas-revocations") as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self._register(conn)
            self.listening.set()
            next_beat = time.monotonic() + self.heartbeat
            while not self._stop.is_set():
                wait = min(_POLL_SECONDS, max(0.0, next_beat - time.monotonic()))
                heard = list(conn.notifies(timeout=wait, stop_after=1))
                if heard:
                    self._apply(conn, heard)
                if time.monotonic() >= next_beat:
                    self._renew(conn)
                    next_beat = time.monotonic() + self.heartbeat
            self.listening.clear()
            self.cache.suspend()
            conn.execute("DELETE FROM revocation_listener WHERE replica = %s", (self.replica,))

    def _register(self, conn: Any) -> None:
        """Take a row with the epoch as it is now (every later one is notified: LISTEN came
        first), then start the cache again, empty. The cache is emptied and stopped *before*
        the row says what was heard: a revocation missed while away is acknowledged by this
        statement, and from then on no entry read before it may be served."""
        self.cache.suspend()
        sent = time.monotonic()
        conn.execute("DELETE FROM revocation_listener WHERE lease_until < clock_timestamp() - interval '1 hour'")
        conn.execute(
            "INSERT INTO revocation_listener (replica, heard, lease_until) "
            "SELECT %(replica)s, epoch, clock_timestamp() + make_interval(secs => %(lease)s) "
            "FROM revocation_epoch WHERE id = 1 "
            "ON CONFLICT (replica) DO UPDATE SET heard = EXCLUDED.heard, lease_until = EXCLUDED.lease_until",
            {"replica": self.replica, "lease": float(self.lease)},
        )
        self.cache.resume(sent + self.lease * LOCAL_SHARE)

    def _renew(self, conn: Any) -> None:
        sent = time.monotonic()
        cur = conn.execute(
            "UPDATE revocation_listener SET lease_until = clock_timestamp() + make_interval(secs => %s) "
            "WHERE replica = %s",
            (float(self.lease), self.replica),
        )
        if cur.rowcount == 0:  # our row was removed (this replica was away for an hour): start again
            self._register(conn)
        else:
            self.cache.extend(sent + self.lease * LOCAL_SHARE)

    def _apply(self, conn: Any, notes: list[Any]) -> None:
        top = 0
        for note in notes:
            try:
                epoch, token_id, tenancy = _parse(note.payload)
            except ValueError:
                log.warning("token revocations: ignored a malformed notification %r", note.payload[:100])
                continue
            if token_id is not None:
                self.cache.forget(token_id=token_id)
            if tenancy is not None:
                self.cache.forget(tenancy=tenancy)
            top = max(top, epoch)
        if top:
            conn.execute(
                "UPDATE revocation_listener SET heard = GREATEST(heard, %s) WHERE replica = %s", (top, self.replica)
            )
