"""Drive an HTTP server with ``wrk`` and read back honest figures.

``wrk`` (C, event loop, Debian package ``wrk``; installed by the Makefile) is the load
generator of every HTTP benchmark here: Python load generators on the same two cores
measure themselves (httpx topped out near 280 requests/s while the bare endpoint serves
about 4,000). A Lua script rotates bearer tokens, sends the JSON body and prints one JSON
line from wrk's ``done`` hook (requests, duration, 4xx/5xx answers, latency percentiles).

Two shapes:

* closed loop (``rate=None``): ``connections`` requests in flight, as fast as the server
  answers — the maximum throughput;
* paced (``rate=R``): requests go out on a fixed schedule, one every ``1/R`` seconds,
  whichever connection is free takes the next slot (wrk's ``delay`` hook returns the time
  to the next unclaimed slot, read from ``clock_gettime`` through LuaJIT's FFI); the
  reported p99 is the latency *at that rate*. ``connections`` only bounds how many may be
  in flight. A constant pause per connection (``connections / R``) would not do: wrk
  starts every connection at once, so they fire in synchronised bursts of ``connections``
  requests and the p99 measures the burst's queue, not the rate. A slot that finds every
  connection busy is skipped (the server is not keeping up): the achieved rate then falls
  below the offered one, and the result reports both.

Every run also reports the CPU share wrk itself used (its user+system time over the wall
time, from ``getrusage`` of the child) and :func:`check_not_saturated` refuses a result
whose load generator spent more than 90 % of a core: then the figure would describe wrk,
not the server.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = r"""
local tokens = {%(tokens)s}
local body = %(body)s
local method = "%(method)s"
local path = "%(path)s"
local interval_ms = %(interval_ms)s
local counter = 0

function request()
  counter = counter + 1
  local headers = {}
  if #tokens > 0 then
    headers["Authorization"] = "Bearer " .. tokens[(counter %% #tokens) + 1]
  end
  if body ~= nil then
    headers["Content-Type"] = "application/json"
  end
  return wrk.format(method, path, headers, body)
end

if interval_ms > 0 then
  local ffi = require("ffi")
  ffi.cdef[[
    typedef struct { long tv_sec; long tv_nsec; } gpucaas_timespec;
    int clock_gettime(int clock_id, gpucaas_timespec *tp);
  ]]
  local ts = ffi.new("gpucaas_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local next_slot = nil
  function delay()
    local now = now_ms()
    if next_slot == nil or next_slot < now then
      next_slot = now  -- the first request, or slots missed while every connection was busy
    end
    local wait = next_slot - now
    next_slot = next_slot + interval_ms
    return math.floor(wait + 0.5)
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "http_errors": %%d, "socket_errors": %%d, ' ..
    '"p50_us": %%d, "p90_us": %%d, "p99_us": %%d, "max_us": %%d}\n',
    summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


class LoadGeneratorSaturated(RuntimeError):
    """wrk used (nearly) a whole core: the figure would measure the load generator."""


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    http_errors: int  # answers with status >= 400 (wrk's errors.status)
    socket_errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    loadgen_cpu_share: float  # wrk's CPU time / wall time (1.0 = one core)
    offered_per_s: float | None = None

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("wrk is not installed: run `make install` (Debian package `wrk`)")
    return path


def _lua_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a valid Lua string literal here


def run(
    url: str,
    path: str,
    *,
    method: str = "GET",
    body: str | None = None,
    tokens: list[str] | None = None,
    connections: int = 16,
    seconds: float = 5.0,
    rate: float | None = None,
    timeout_s: float = 10.0,
) -> LoadResult:
    """One wrk run (one thread) against ``url + path``; see the module docstring."""
    interval_ms = 0 if rate is None else 1000.0 / rate
    script = _SCRIPT % {
        "tokens": ", ".join(_lua_string(t) for t in (tokens or [])),
        "body": "nil" if body is None else _lua_string(body),
        "method": method,
        "path": path,
        "interval_ms": repr(interval_ms),
    }
    with tempfile.TemporaryDirectory() as tmp:
        lua = Path(tmp) / "bench.lua"
        lua.write_text(script)
        cmd = [
            wrk_path(),
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            f"{timeout_s:g}s",
            "-s",
            str(lua),
            url,
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary: {proc.stdout[-500:]}")
    data = json.loads(line.removeprefix("WRKJSON "))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return LoadResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        http_errors=data["http_errors"],
        socket_errors=data["socket_errors"],
        p50_ms=data["p50_us"] / 1000,
        p90_ms=data["p90_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        max_ms=data["max_us"] / 1000,
        loadgen_cpu_share=cpu / wall if wall else 0.0,
        offered_per_s=rate,
    )


def check_not_saturated(name: str, result: LoadResult, limit: float = 0.9) -> None:
    """Fail loudly when wrk itself was the bottleneck (``limit`` of one core)."""
    if result.loadgen_cpu_share > limit:
        raise LoadGeneratorSaturated(
            f"{name}: wrk used {result.loadgen_cpu_share:.0%} of a core — the load generator, not the "
            "server, set this figure; give it a core of its own or fewer connections"
        )
