"""One writer at a time on a SQLite file, queued in this process instead of in SQLite's busy handler.

SQLite lets one transaction write at a time. A second writer that finds the lock taken waits
in SQLite's busy handler, which polls: it sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50 and
then 100 ms between tries, whenever the lock was freed. Under a burst (submissions, the
worker's pod records and the pod watch's status reports, all in the API process) a write of
about a millisecond waited hundreds: the busy handler's sleeps, not the work.
(Rails' SQLite adapter and Django's ``transaction_mode`` answer the same problem with
``BEGIN IMMEDIATE`` and a busy handler that does not back off.)

Here each connection to the file takes a lock shared by the process's connections to that
file before its first statement that may write (anything but ``SELECT``, ``PRAGMA`` and
``EXPLAIN``: Python's ``sqlite3`` opens its implicit transaction at such a statement) and gives
it back once the transaction is over (commit, rollback, close, or a statement that left no
transaction open, as in autocommit). The next writer is woken at once. SQLite's own locking
stays underneath: another process writing the file, or a thread that already holds the lock
through another connection, still meets SQLite's busy handler after ``timeout`` seconds here.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

_READS = ("SELECT", "PRAGMA", "EXPLAIN")
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def lock_for(database: str) -> threading.Lock:
    """The process's write lock of one database file (every engine on it shares it)."""
    key = str(Path(database).resolve())
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def may_write(sql: str) -> bool:
    return not sql.lstrip().upper().startswith(_READS)


def connection_factory(database: str, *, timeout: float) -> type[sqlite3.Connection]:
    """A ``sqlite3.Connection`` class (``sqlite3.connect(factory=...)``) whose writes take turns."""
    lock = lock_for(database)

    class SerialisedCursor(sqlite3.Cursor):
        def execute(self, sql: str, parameters: Any = (), /) -> SerialisedCursor:
            return self._turn(super().execute, sql, parameters)

        def executemany(self, sql: str, seq_of_parameters: Any, /) -> SerialisedCursor:
            return self._turn(super().executemany, sql, seq_of_parameters)

        def _turn(self, run: Any, sql: str, parameters: Any) -> SerialisedCursor:
            owner: SerialisedConnection = self.connection  # type: ignore[assignment]
            owner.before(sql)
            try:
                run(sql, parameters)
            finally:
                owner.after()
            return self

    class SerialisedConnection(sqlite3.Connection):
        holds = False  # this connection holds the process's write lock

        def cursor(self, factory: Any = SerialisedCursor) -> Any:
            return super().cursor(factory)

        def execute(self, sql: str, parameters: Any = (), /) -> Any:
            return self.cursor().execute(sql, parameters)

        def before(self, sql: str) -> None:
            if not self.holds and may_write(sql):
                # a timeout (e.g. this thread holds the lock through another connection) falls
                # back to SQLite's own locking, as without this class
                self.holds = lock.acquire(timeout=timeout)

        def after(self) -> None:
            if self.holds and not self.in_transaction:
                self.release()

        def release(self) -> None:
            if self.holds:
                self.holds = False
                lock.release()

        def commit(self) -> None:
            try:
                super().commit()
            finally:
                if not self.in_transaction:  # a failed commit leaves it open: the rollback ends it
                    self.release()

        def rollback(self) -> None:
            try:
                super().rollback()
            finally:
                self.release()

        def close(self) -> None:
            try:
                super().close()
            finally:
                self.release()

    return SerialisedConnection
