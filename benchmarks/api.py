"""API load benchmark: POST /v1/containers against PostgreSQL vs a bare FastAPI endpoint.

Run: ``python -m benchmarks.api [--quick]``. The last line of stdout is one JSON object
with ``throughput_ratio_vs_bare``, ``p50_ms``, ``p99_ms``, ``requests_per_s`` (and the
bare endpoint's figures beside them).

Method: both servers run the same way — ``uvicorn`` in a subprocess of its own, one
worker, plain HTTP on 127.0.0.1, access log off — and are driven by the same closed-loop
load generator (``httpx.AsyncClient``, ``--concurrency`` requests in flight, keep-alive),
in the same run. The gpucaas API runs ``gpucaas api`` with a fresh PostgreSQL database
(created and dropped here) and its submission worker switched off, so the figure is the
submission path itself: bearer-token lookup, body validation, quota check under a row
lock, and the durable commit of the Queued row before the 202. Submissions go round-robin
to 20 tenancies (one token each). The bare endpoint accepts the same JSON body and
answers 202 with an id, touching nothing. The load generator shares the machine's CPUs
with the server, so absolute figures are a floor; the ratio is the robust figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from collections.abc import Iterator
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

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


# --- helpers ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
def _serve(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def _postgres_database() -> Iterator[str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin_url = os.environ.get("GPUCAAS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    name = f"gpucaas_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def _load(url: str, tokens: list[str], total: int, concurrency: int) -> tuple[float, list[float], int]:
    """Closed loop: ``concurrency`` workers send ``total`` POSTs; returns (seconds, latencies, errors)."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(total))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker() -> None:
            nonlocal errors
            for i in counter:
                headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}"}
                t0 = time.perf_counter()
                r = await client.post("/v1/containers", json=PAYLOAD, headers=headers)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 202:
                    errors += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - start, latencies, errors


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(url: str, tokens: list[str], total: int, concurrency: int, warmup: int) -> dict[str, Any]:
    asyncio.run(_load(url, tokens, warmup, concurrency))
    seconds, lat, errors = asyncio.run(_load(url, tokens, total, concurrency))
    return {
        "requests_per_s": total / seconds,
        "p50_ms": statistics.median(lat) * 1000,
        "p99_ms": _pct(lat, 0.99) * 1000,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer requests)")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    total = args.requests or (600 if args.quick else 4000)
    warmup = max(50, total // 10)

    port_bare = _free_port()
    bare_cmd = [sys.executable, "-m", "uvicorn", "benchmarks.api:bare_app", "--host", "127.0.0.1",
                "--port", str(port_bare), "--no-access-log", "--log-level", "warning"]
    with _serve(bare_cmd, port_bare) as url:
        bare = _measure(url, ["unused"], total, args.concurrency, warmup)
    print(f"bare FastAPI: {bare['requests_per_s']:.0f} req/s, p50 {bare['p50_ms']:.1f} ms", file=sys.stderr)

    with _postgres_database() as db_url:
        port = _free_port()
        env = {
            "GPUCAAS_DATABASE_URL": db_url,
            "GPUCAAS_ADMIN_TOKEN": ADMIN_TOKEN,
            "GPUCAAS_RUN_WORKER": "false",
            "GPUCAAS_LOG_LEVEL": "WARNING",
            "GPUCAAS_KUBECONFIG": "",
        }
        env.pop("GPUCAAS_KUBECONFIG")
        cmd = [sys.executable, "-m", "gpucaas", "api", "--host", "127.0.0.1", "--port", str(port)]
        with _serve(cmd, port, env) as url:
            tokens = []
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30) as c:
                for i in range(TENANCIES):
                    c.post("/v1/admin/tenancies", json={"name": f"bench-{i}", "gpu_quota": 100000}).raise_for_status()
                    tokens.append(c.post(f"/v1/admin/tenancies/bench-{i}/tokens").json()["token"])
            ours = _measure(url, tokens, total, args.concurrency, warmup)
    print(f"gpucaas POST /v1/containers: {ours['requests_per_s']:.0f} req/s, p50 {ours['p50_ms']:.1f} ms",
          file=sys.stderr)

    result = {
        "throughput_ratio_vs_bare": round(ours["requests_per_s"] / bare["requests_per_s"], 3),
        "p50_ms": round(ours["p50_ms"], 2),
        "p99_ms": round(ours["p99_ms"], 2),
        "requests_per_s": round(ours["requests_per_s"], 1),
        "bare_requests_per_s": round(bare["requests_per_s"], 1),
        "bare_p50_ms": round(bare["p50_ms"], 2),
        "bare_p99_ms": round(bare["p99_ms"], 2),
        "errors": ours["errors"],
        "requests": total,
        "concurrency": args.concurrency,
        "database": "postgresql",
    }
    print(json.dumps(result))
    return 0 if ours["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
