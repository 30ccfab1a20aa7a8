"""SQLite writers take turns on the process's lock (services.api.db.sqlite_writer), held from a
transaction's first write to its end, whatever ends it."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import Engine, text

from services.api.db import engines, sqlite_writer


def engine_on(path: Path) -> Engine:
    engine = engines.make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)"))
    return engine


def test_the_lock_is_held_from_the_first_write_to_commit_or_rollback(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    engine = engine_on(path)
    lock = sqlite_writer.lock_for(str(path))
    with engine.connect() as conn:
        conn.execute(text("SELECT count(*) FROM t"))
        assert not lock.locked()  # reads do not queue
        conn.execute(text("INSERT INTO t (v) VALUES ('one')"))
        assert lock.locked()
        conn.commit()
        assert not lock.locked()
        conn.execute(text("UPDATE t SET v = 'two'"))
        assert lock.locked()
        conn.rollback()
        assert not lock.locked()
        conn.execute(text("DELETE FROM t"))
        assert lock.locked()
    assert not lock.locked()  # the connection went back to the pool: SQLAlchemy rolled it back
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("INSERT INTO t (v) VALUES ('autocommitted')"))
        assert not lock.locked()  # no transaction left open: given back after the statement
    with engine.connect() as conn:
        assert conn.execute(text("SELECT v FROM t")).scalars().all() == ["one", "autocommitted"]


def test_writers_through_two_engines_on_one_file_share_the_lock_and_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    engines = [engine_on(path), engine_on(path)]  # as the API's request and service pools
    errors: list[BaseException] = []

    def write(engine: Engine, n: int) -> None:
        try:
            for i in range(40):
                with engine.begin() as conn:
                    conn.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": f"{n}-{i}"})
                    conn.execute(text("SELECT count(*) FROM t"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(engines[n % 2], n)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with engines[0].connect() as conn:
        assert conn.execute(text("SELECT count(DISTINCT v) FROM t")).scalar_one() == 12 * 40
    assert not sqlite_writer.lock_for(str(path)).locked()
