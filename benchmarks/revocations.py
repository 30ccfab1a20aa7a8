"""What exact revocation and the audit trail cost, on PostgreSQL: the figures behind the
choices in ``services.api.security.revocations`` and ``services.api.store.audit``.

Run: ``python -m benchmarks.revocations [--quick]`` (PostgreSQL at
``GPUCAAS_TEST_POSTGRES_URL``, default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``;
a fresh database is created and dropped). The last line of stdout is one JSON object:

* ``cache_hit_us`` — a token found in the in-process cache (what most requests pay now);
* ``token_query_us`` / ``token_query_cpu_us`` — the alternative, a query per request: the
  token row by its digest on psycopg's asyncio pool (as the submission's statements run),
  wall time and this process's CPU per query;
* ``revoke_ack_ms_p50`` / ``_p99`` — a revocation with two replicas listening: from the
  commit until both have acknowledged it (``revocations.wait_heard`` returns);
* ``admit_us`` / ``admit_cpu_us`` and ``admit_audited_us`` / ``admit_audited_cpu_us`` — the
  submission's admission statement alone, and with its audit event in the same statement.

Each figure is the median of ``rounds`` runs (wall) or the CPU of all of them divided by
the count; the machine is shared, so compare figures of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from sqlalchemy import bindparam, select
from sqlmodel import Session

from benchmarks.kit.database import scratch_database
from benchmarks.kit.report import emit, percentile
from services.api.db import engines
from services.api.db.admission_pool import AdmissionPool
from services.api.domain.models import ApiToken, ContainerCreate, TenancyCreate
from services.api.security import bearer, revocations
from services.api.security.token_cache import TokenCache, VerifiedToken
from services.api.store import admission, tenancies as tenancy_store, tokens as token_store
from services.api.store.audit import Actor


def _cache_hit_us(n: int) -> float:
    cache = TokenCache(ttl=60)
    cache.put(
        "d",
        VerifiedToken(id="tok", tenancy="t", scope="read", expires_at=None, last_used_at=None),
        generation=cache.generation,
    )
    started = time.perf_counter()
    for _ in range(n):
        cache.get("d")
    return (time.perf_counter() - started) / n * 1e6


async def _timed(pool: AdmissionPool, stmt: Any, params_of: Any, n: int) -> tuple[float, float]:
    """(median wall µs, CPU µs per call) of ``n`` sequential statements."""
    walls = []
    cpu = time.process_time()
    for i in range(n):
        started = time.perf_counter()
        await pool.first(stmt, params_of(i))
        walls.append(time.perf_counter() - started)
    return statistics.median(walls) * 1e6, (time.process_time() - cpu) / n * 1e6


async def _pool_figures(url: str, digest: str, n: int) -> dict[str, float]:
    pool = AdmissionPool(url, max_size=2)
    await pool.open()
    try:
        by_digest = select(ApiToken.__table__).where(ApiToken.__table__.c.token_hash == bindparam("h"))  # type: ignore[attr-defined]
        await _timed(pool, by_digest, lambda i: {"h": digest}, 100)  # warm up
        query_wall, query_cpu = await _timed(pool, by_digest, lambda i: {"h": digest}, n)
        actor = Actor("tok_bench", "bench", "127.0.0.1")
        data = ContainerCreate(image="nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04", gpus=1)

        def plain(i: int) -> dict[str, Any]:
            return admission._admission(True, False, admission._submission("bench", data, None)[1], None)[1]

        def audited(i: int) -> dict[str, Any]:
            return admission._admission(True, False, admission._submission("bench", data, None)[1], actor)[1]

        stmt_plain = admission._ADMIT[(True, False)]
        stmt_audited = admission._ADMIT_AUDITED[False]
        await _timed(pool, stmt_plain, plain, 100)
        await _timed(pool, stmt_audited, audited, 100)
        admit, admit_audited = [], []
        for _ in range(4):  # interleaved: the table grows as both run
            admit.append(await _timed(pool, stmt_plain, plain, n // 4))
            admit_audited.append(await _timed(pool, stmt_audited, audited, n // 4))
    finally:
        await pool.close()
    return {
        "token_query_us": round(query_wall, 1),
        "token_query_cpu_us": round(query_cpu, 1),
        "admit_us": round(statistics.mean(w for w, _ in admit), 1),
        "admit_cpu_us": round(statistics.mean(c for _, c in admit), 1),
        "admit_audited_us": round(statistics.mean(w for w, _ in admit_audited), 1),
        "admit_audited_cpu_us": round(statistics.mean(c for _, c in admit_audited), 1),
    }


def _revoke_figures(url: str, engine: Any, rounds: int) -> dict[str, float]:
    listeners = [
        revocations.Listener(url, TokenCache(ttl=60, guarded=True), replica=f"bench-{i}").start() for i in range(2)
    ]
    try:
        for listener in listeners:
            if not listener.listening.wait(30):
                raise RuntimeError("a revocation listener did not start")
        took = []
        with Session(engine) as session:
            for i in range(rounds):
                epoch = revocations.announce(session, token_id=f"tok_{i}")
                session.commit()
                started = time.perf_counter()
                if not revocations.wait_heard(engine, epoch, timeout=10):
                    raise RuntimeError("a revocation was not acknowledged")
                took.append(time.perf_counter() - started)
    finally:
        for listener in listeners:
            listener.stop()
    return {
        "revoke_ack_ms_p50": round(statistics.median(took) * 1e3, 2),
        "revoke_ack_ms_p99": round(percentile(took, 0.99) * 1e3, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    n = 1000 if args.quick else 5000
    with scratch_database() as url:
        engine = engines.make_engine(url)
        try:
            engines.upgrade(engine)
            with Session(engine) as session:
                tenancy_store.create_tenancy(
                    session, data=TenancyCreate(name="bench", gpu_quota=100000, pod_quota=100000)
                )
                _row, secret = token_store.create_token(session, tenancy="bench", name="bench", scope="admin")
            figures: dict[str, Any] = {"cache_hit_us": round(_cache_hit_us(200_000), 2)}
            figures.update(asyncio.run(_pool_figures(url, bearer.hash_token(secret), n)))
            figures.update(_revoke_figures(url, engine, 50 if args.quick else 200))
        finally:
            engine.dispose()
    emit(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
