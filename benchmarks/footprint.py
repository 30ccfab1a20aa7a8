"""Resident memory and idle CPU of the node daemons, measured on the real sandbox.

Run: ``python -m benchmarks.footprint [--quick]``. The last line of stdout is one JSON
object: per daemon (``device_plugin`` — with the GPU-lease agent in its process —,
``fabric``, ``node_agent`` for reference) its ``rss_mb`` (VmRSS, MiB) after the sandbox
has settled, ``idle_cpu_pct`` (user+system CPU over an idle window, % of one core) and
``threads``; and ``rss_mb_max`` / ``idle_cpu_pct_max`` over the daemons that run on a GPU
node in production (device plugin and fabric service; the node agent stands in for the
kubelet and is reported only for comparison).

Method: ``gpucaas sandbox`` parts are started with one simulated node (every process as
in production: the real service code, its real protocols), nothing is submitted, the
figures are read from ``/proc/<pid>/status`` and ``/proc/<pid>/stat`` of each daemon's
process (the supervisor's child). Targets (issue 18): under 60 MB and under 1 % of a core
each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

RSS_TARGET_MB = 60.0
CPU_TARGET_PCT = 1.0
PRODUCTION_DAEMONS = ("device_plugin", "fabric")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter settle and idle windows")
    args = parser.parse_args(argv)
    settle_s, idle_s = (5.0, 10.0) if args.quick else (20.0, 60.0)

    from gpucaas.programs.sandbox import runner

    with tempfile.TemporaryDirectory(prefix="gpucaas-footprint-") as tmp:
        sb = runner.start(Path(tmp), nodes=("gpu-node-a",), api_port=runner.free_port())
        try:
            time.sleep(settle_s)  # a benchmark, not a test: let start-up work finish
            services = sb.supervisor.services
            wanted = {"device_plugin": "device-plugin-gpu-node-a", "fabric": "fabric-gpu-node-a",
                      "node_agent": "node-agent-gpu-node-a"}
            pids = {k: services[name].process.pid for k, name in wanted.items() if name in services}
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(idle_s)
            wall = time.monotonic() - t0
            daemons = {
                k: {"rss_mb": round(rss_mb(p), 1),
                    "idle_cpu_pct": round(100 * (cpu_seconds(p) - before[k]) / wall, 2),
                    "threads": threads(p)}
                for k, p in pids.items()
            }
        finally:
            sb.stop()
    prod = [daemons[k] for k in PRODUCTION_DAEMONS if k in daemons]
    result = {
        "daemons": daemons,
        "rss_mb_max": max(d["rss_mb"] for d in prod),
        "idle_cpu_pct_max": max(d["idle_cpu_pct"] for d in prod),
        "targets_met": {
            f"rss_mb<{RSS_TARGET_MB:g}": all(d["rss_mb"] < RSS_TARGET_MB for d in prod),
            f"idle_cpu_pct<{CPU_TARGET_PCT:g}": all(d["idle_cpu_pct"] < CPU_TARGET_PCT for d in prod),
        },
        "idle_window_s": idle_s,
        "quick": args.quick,
    }
    for name, d in daemons.items():
        print(f"{name}: {d['rss_mb']} MB resident, {d['idle_cpu_pct']} % of a core idle, {d['threads']} threads",
              file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
