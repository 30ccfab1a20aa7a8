"""API load benchmark, measured with ``wrk``: the tenant API against a bare FastAPI endpoint.

Run: ``python -m benchmarks.api [--quick]``. The last line of stdout is one JSON object:

* ``submit_per_s`` — ``POST /v1/containers`` on PostgreSQL, 20 tenancies, closed loop;
* ``submit_per_s_one_tenancy`` — the same with one tenancy (its quota row is the hot spot);
* ``throughput_ratio_vs_bare`` — ``submit_per_s`` / the bare endpoint's POST rate, same tool,
  same run, same uvicorn settings;
* ``p99_ms_at_half_load`` — p99 of submissions offered at half of ``submit_per_s``
  (paced, see :mod:`benchmarks.kit.loadgen`);
* ``submit_per_s_1k_rows`` / ``submit_per_s_1m_rows`` — the submission rate with 1,000 and
  with 1,000,000 finished containers already in the table (history must not slow it);
* ``list_per_s`` — ``GET /v1/containers?limit=20``; ``healthz_per_s`` — ``GET /healthz``;
* ``server_cpu_ms_per_submit`` — CPU time the API process spent per submission in the
  20-tenancy run (user + system, from ``/proc``): the figure least disturbed by other load
  on a shared machine;
* ``loadgen_cpu_share_max`` — the most CPU wrk used in any run (it must stay below 0.9 of
  a core, else the run fails: the figure would describe the load generator);
* ``database_tps`` — PostgreSQL's own rate for exactly what one submission commits, driven by
  ``pgbench`` in the same run, same database, same client count (``--connections``), with
  the API idle: the statement the API runs (built by
  ``services.api.store.admission.admission_on_postgres``, the admission with its audit
  event, the quota triggers firing) with fresh ids and a random one of the 20 tenancies,
  one autocommit transaction each, prepared, as the API's driver runs it;
* ``throughput_ratio_vs_database`` — ``submit_per_s`` / ``database_tps``: how much of the
  database's durable commit rate the submission path delivers.
* ``statement_only_per_s`` / ``statement_only_ratio_vs_database`` /
  ``statement_only_cpu_ms_per_submit`` — the same load on ``statement_app``: a raw ASGI app
  under the same uvicorn settings that runs only the admission statement, on the API's own
  psycopg pool, for a random one of the 20 tenancies (no FastAPI, no token, no validation,
  no middleware, a fixed answer). No submission path in Python does less, so its ratio is
  the ceiling of ``throughput_ratio_vs_database`` on the machine that ran it.

Method: every server runs the same way — ``uvicorn`` in a subprocess of its own, one
worker, plain HTTP on 127.0.0.1, access log off — and is driven by ``wrk`` (one thread,
``--connections`` connections). The gpucaas API runs ``gpucaas api`` with a fresh
PostgreSQL database (created and dropped here) and its submission worker switched off,
so the figure is the submission path itself: bearer-token check (cached in-process for a
few seconds, see ``services.api.security.token_cache``), body validation, and the one-statement
quota admission that durably commits the Queued row before the 202 (docs/api-performance.md). History rows are
inserted with one ``INSERT … SELECT generate_series`` from a row the API's own model
builds. The bare endpoint accepts the same JSON body and answers 202 with an id. Load
generator and server share the machine's CPUs (two cores here); the ratio is the robust
figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

from benchmarks.kit import loadgen, processes
from benchmarks.kit.database import scratch_database
from benchmarks.kit.procstat import cpu_seconds
from benchmarks.kit.report import emit, say
from devtools.ports import free_port

ADMIN_TOKEN = "bench-admin-token"
PAYLOAD = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "gpus": 1}
TENANCIES = 20


# --- the bare endpoint (served by uvicorn as ``benchmarks.api:bare_app``) -------------


class _BareBody(BaseModel):
    model_config = ConfigDict(extra="allow")


bare_app = FastAPI()


@bare_app.post("/v1/containers", status_code=202)
async def _bare_submit(body: _BareBody) -> dict[str, str]:
    return {"id": uuid.uuid4().hex, "status": "Queued"}


@bare_app.get("/healthz")
async def _bare_health() -> dict[str, str]:
    return {"status": "ok"}


# --- the statement alone (served by uvicorn as ``benchmarks.api:statement_app``) ------
#
# The least any submission path in Python can do: a raw ASGI app (no FastAPI, no token, no
# body validation, no middleware, a fixed answer) that runs the submission's own admission
# statement on the API's own psycopg pool for one of the tenancies at random. Its rate over
# pgbench's is the ceiling of ``throughput_ratio_vs_database`` on this machine.


class _StatementOnly:
    def __init__(self) -> None:
        self.pool: Any = None
        self.data: Any = None
        self.actor: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        more = True
        while more:  # the body is read, not parsed
            more = (await receive()).get("more_body", False)
        status = 200
        if scope["method"] == "POST":
            from services.api.store import admission

            values = admission.new_submission_values(f"bench-{random.randrange(TENANCIES)}", self.data)
            stmt, params = admission.admission_on_postgres(values, self.actor)
            status = 202 if await self.pool.first(stmt, params) is not None else 409
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"status":"Queued"}'})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        from services.api.db.admission_pool import AdmissionPool
        from services.api.domain.models import ContainerCreate
        from services.api.store.audit import Actor

        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.data = ContainerCreate.model_validate(PAYLOAD)
                self.actor = Actor(token_id="tok_bench", token_name="bench", client="127.0.0.1")
                self.pool = AdmissionPool(os.environ["GPUCAAS_DATABASE_URL"], max_size=32)
                await self.pool.open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


statement_app = _StatementOnly()


# --- helpers ------------------------------------------------------------------------


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become healthy")


@contextmanager
def _serve(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Run the server; yields its URL and process id."""
    proc = processes.start(cmd, None, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url, proc.pid
    finally:
        processes.stop(proc, 20)


def _closed(
    url: str, path: str, tokens: list[str], seconds: float, connections: int, method: str = "POST"
) -> loadgen.LoadResult:
    body = json.dumps(PAYLOAD) if method == "POST" else None
    return loadgen.run(url, path, method=method, body=body, tokens=tokens, connections=connections, seconds=seconds)


def _seed_history(db_url: str, tenancy: str, rows: int) -> None:
    """Insert ``rows`` finished containers for ``tenancy`` in one statement."""
    from sqlalchemy import create_engine, func, insert, literal, literal_column, select, text

    from services.api.domain.models import Container, utcnow

    table = Container.__table__  # type: ignore[attr-defined]  # SQLAlchemy's, set on table models
    template = Container(
        id="x",
        tenancy=tenancy,
        image=str(PAYLOAD["container-url"]),
        status="Succeeded",
        pod_name="x",
        request_hash="0" * 64,
        gpus=1,
        pod_created=True,
        pod_deleted=True,
        started_at=utcnow(),
        finished_at=utcnow(),
    )
    values = template.model_dump()
    n: Any = literal_column("s.n")
    exprs = []
    for col in table.columns:
        if col.name == "id":
            exprs.append(func.substr(func.md5(func.concat(tenancy, "-", n)), 1, 20).label(col.name))
        elif col.name == "pod_name":
            exprs.append(func.concat("gpucaas-hist-", n).label(col.name))
        else:
            exprs.append(literal(values.get(col.name), type_=col.type).label(col.name))
    series = text("generate_series(1, :rows) AS s(n)").bindparams(rows=rows)
    stmt = insert(table).from_select([c.name for c in table.columns], select(*exprs).select_from(series))
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(stmt)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE container")
    finally:
        engine.dispose()


def _pgbench_script(tenancies: int) -> str:
    """The submission's statement as a pgbench script: the API's own statement with its
    values inlined, except the ids (fresh per transaction) and the tenancy (random)."""
    from sqlalchemy import literal
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.sql import visitors
    from sqlalchemy.sql.elements import BindParameter

    from services.api.domain.models import ContainerCreate
    from services.api.store import admission
    from services.api.store.audit import Actor

    values = admission.new_submission_values("bench-0", ContainerCreate.model_validate(PAYLOAD))
    stmt, params = admission.admission_on_postgres(
        values, Actor(token_id="tok_bench", token_name="bench", client="127.0.0.1")
    )

    def inline(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in params:
            return literal(params[element.key], type_=element.type)
        return None

    no_options: dict[str, Any] = {}
    inlined: Any = visitors.replacement_traverse(stmt, no_options, inline)
    sql = str(inlined.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    fresh = "substr(md5(CAST(random() AS text) || CAST(clock_timestamp() AS text)), 1, 20)"  # no ::, a pgbench variable
    for old, new in (
        (f"'{values['pod_name']}'", f"'gpucaas-' || {fresh}"),
        (f"'{values['id']}'", fresh),
        (f"'{params['a_id']}'", f"'ev_' || {fresh}"),
        ("'bench-0'", "'bench-' || CAST(:t AS text)"),
    ):
        if old not in sql:
            raise RuntimeError(f"the submission statement no longer holds {old}: update the pgbench script")
        sql = sql.replace(old, new)
    # the row's times: the statement's own clock (a literal's colons would read as pgbench variables)
    sql = re.sub(r"'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\+00:00'", "statement_timestamp()", sql)
    sql = re.sub(r"'[^']*'", lambda m: m.group(0).replace(":", "' || chr(58) || '"), sql)  # the image's tag
    return f"\\set t random(0, {tenancies - 1})\n" + " ".join(sql.split()) + ";\n"


def _pgbench(db_url: str, seconds: float, clients: int) -> float:
    """PostgreSQL's transactions per second for one submission's statement (``pgbench``)."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="bench-submission-") as script:
        script.write(_pgbench_script(TENANCIES))
        script.flush()
        out = subprocess.run(
            [
                "pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(max(1, round(seconds))),
                "-f", script.name, "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
                "-U", url.username or "postgres", url.database or "test",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    found = re.search(r"^tps = ([0-9.]+)", out.stdout, re.M)
    failed = re.search(r"number of failed transactions: ([1-9][0-9]*)", out.stdout)
    if out.returncode != 0 or found is None or failed:
        raise RuntimeError(f"pgbench failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return float(found.group(1))


def _uvicorn_cmd(app: str, port: int) -> list[str]:
    """One worker, plain HTTP on 127.0.0.1, access log off: how every server here runs."""
    return [
        sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


def _statement_only(env: dict[str, str], conns: int, seconds: float, measure: Any) -> tuple[loadgen.LoadResult, float]:
    """``statement_app`` served as the bare endpoint is: its load result and CPU per submission."""
    port = free_port()
    with _serve(_uvicorn_cmd("benchmarks.api:statement_app", port), port, env) as (url, pid):
        _closed(url, "/v1/containers", [], 1, conns)  # warm-up: pool, prepared statement
        cpu_before = cpu_seconds(pid)
        result = measure("the statement alone (raw ASGI)", _closed(url, "/v1/containers", [], seconds, conns))
        return result, (cpu_seconds(pid) - cpu_before) / max(1, result.requests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, smaller history")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--history-rows",
        type=int,
        default=1_000_000,
        help="finished containers in the table for the second submission run",
    )
    args = parser.parse_args(argv)
    seconds = args.seconds or (4.0 if args.quick else 10.0)
    conns = args.connections
    runs: list[tuple[str, loadgen.LoadResult]] = []

    def measure(name: str, result: loadgen.LoadResult) -> loadgen.LoadResult:
        loadgen.check_not_saturated(name, result)
        runs.append((name, result))
        say(
            f"{name}: {result.per_s:.0f} req/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, "
            f"errors {result.http_errors}, wrk CPU {result.loadgen_cpu_share:.0%}"
        )
        return result

    port_bare = free_port()
    bare_cmd = _uvicorn_cmd("benchmarks.api:bare_app", port_bare)
    with _serve(bare_cmd, port_bare) as (url, _pid):
        _closed(url, "/v1/containers", [], 1, conns)  # warm-up
        bare = measure("bare POST", _closed(url, "/v1/containers", [], seconds, conns))
        bare_health = measure("bare GET /healthz", _closed(url, "/healthz", [], seconds, conns, "GET"))

    with scratch_database() as db_url:
        port = free_port()
        env = {
            "GPUCAAS_DATABASE_URL": db_url,
            "GPUCAAS_ADMIN_TOKEN": ADMIN_TOKEN,
            "GPUCAAS_RUN_WORKER": "false",
            "GPUCAAS_LOG_LEVEL": "WARNING",
            # the figure is the submission path, not the abuse limits (429s would count as errors)
            "GPUCAAS_RATE_LIMIT_TOKEN": "",
            "GPUCAAS_RATE_LIMIT_TENANCY": "",
            "GPUCAAS_MAX_REQUESTS_PER_CLIENT": "100000",
        }
        cmd = [sys.executable, "-m", "gpucaas", "api", "--host", "127.0.0.1", "--port", str(port)]
        with _serve(cmd, port, env) as (url, pid):
            tokens = []
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30) as c:
                for i in range(TENANCIES + 1):
                    c.post(
                        "/v1/admin/tenancies", json={"name": f"bench-{i}", "gpu_quota": 100000, "pod_quota": 100000}
                    ).raise_for_status()
                    tokens.append(c.post(f"/v1/admin/tenancies/bench-{i}/tokens").json()["token"])
            solo, many = tokens[-1:], tokens[:-1]
            _seed_history(db_url, "bench-history", 1_000)
            _closed(url, "/v1/containers", many, 3, conns)  # warm-up: pool, prepared statements
            cpu_before = cpu_seconds(pid)
            rows_1k = measure("POST, 20 tenancies, 1k rows", _closed(url, "/v1/containers", many, seconds, conns))
            cpu_per_submit = (cpu_seconds(pid) - cpu_before) / max(1, rows_1k.requests)
            database_tps = _pgbench(db_url, seconds, conns)
            say(f"pgbench, one submission's statement: {database_tps:.0f} tps")
            # the ceiling: the statement alone behind a raw ASGI app, same database, rows and load
            floor, floor_cpu = _statement_only(env, conns, seconds, measure)
            one = measure("POST, one tenancy", _closed(url, "/v1/containers", solo, seconds, conns))
            half_rate = max(1.0, rows_1k.per_s / 2)
            half = measure(
                f"POST offered at {half_rate:.0f}/s",
                loadgen.run(
                    url,
                    "/v1/containers",
                    method="POST",
                    body=json.dumps(PAYLOAD),
                    tokens=many,
                    connections=conns * 2,
                    seconds=seconds,
                    rate=half_rate,
                ),
            )
            listing = measure(
                "GET /v1/containers?limit=20", _closed(url, "/v1/containers?limit=20", many, seconds, conns, "GET")
            )
            health = measure("GET /healthz", _closed(url, "/healthz", [], seconds, conns, "GET"))
            history = args.history_rows
            _seed_history(db_url, "bench-history-2", history - 1_000)
            _closed(url, "/v1/containers", many, 1, conns)  # warm-up
            rows_1m = measure(
                f"POST, 20 tenancies, {history // 1000}k rows", _closed(url, "/v1/containers", many, seconds, conns)
            )

    result = {
        "submit_per_s": round(rows_1k.per_s, 1),
        "submit_per_s_one_tenancy": round(one.per_s, 1),
        "throughput_ratio_vs_bare": round(rows_1k.per_s / bare.per_s, 3) if bare.per_s else None,
        "database_tps": round(database_tps, 1),
        "throughput_ratio_vs_database": round(rows_1k.per_s / database_tps, 3) if database_tps else None,
        "statement_only_per_s": round(floor.per_s, 1),
        "statement_only_ratio_vs_database": round(floor.per_s / database_tps, 3) if database_tps else None,
        "statement_only_cpu_ms_per_submit": round(floor_cpu * 1000, 3),
        "p99_ms_at_half_load": round(half.p99_ms, 2),
        "half_load_offered_per_s": round(half_rate, 1),
        "half_load_achieved_per_s": round(half.per_s, 1),
        "submit_per_s_1k_rows": round(rows_1k.per_s, 1),
        "submit_per_s_1m_rows": round(rows_1m.per_s, 1),
        "history_rows_ratio": round(rows_1m.per_s / rows_1k.per_s, 3) if rows_1k.per_s else None,
        "history_rows": history,
        "server_cpu_ms_per_submit": round(cpu_per_submit * 1000, 3),
        "p50_ms": round(rows_1k.p50_ms, 2),
        "p99_ms": round(rows_1k.p99_ms, 2),
        "list_per_s": round(listing.per_s, 1),
        "healthz_per_s": round(health.per_s, 1),
        "bare_per_s": round(bare.per_s, 1),
        "bare_p99_ms": round(bare.p99_ms, 2),
        "bare_healthz_per_s": round(bare_health.per_s, 1),
        "loadgen_cpu_share_max": round(max(r.loadgen_cpu_share for _, r in runs), 3),
        "errors": sum(r.http_errors + r.socket_errors for name, r in runs if not name.startswith("bare")),
        "load_generator": "wrk 1 thread",
        "connections": conns,
        "seconds_per_run": seconds,
        "database": "postgresql",
    }
    emit(result)
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
