"""Resident memory and idle CPU of the node daemons, measured on the real sandbox.

Run: ``python -m benchmarks.footprint [--quick]``. The last line of stdout is one JSON
object: per daemon (``device_plugin`` — with the GPU-lease agent in its process —,
``fabric``, and the node's real ``kubelet`` for reference) its ``rss_mb`` (VmRSS, MiB) after the sandbox
has settled, ``pss_mb`` (shared library pages split between the processes mapping them),
``idle_cpu_pct`` (user+system CPU over an idle window, % of one core) and ``threads``;
and ``rss_mb_max`` / ``idle_cpu_pct_max`` over the daemons that run on a GPU node in
production (device plugin and fabric service; the kubelet, v1.36 built from its Go module,
is reported only for comparison).

The GPU-lease agent runs inside the device plugin's process (``gpucaas device-plugin
--leases``). To report it separately, a second device plugin is started on the same
node without leases (``device_plugin_alone``: registered with the same real kubelet under
a resource name of its own, ``gpucaas.dev/fp``, with its own CDI folder, the same
fabric socket and its own metrics port) over the same idle window; ``lease_agent`` is the
difference, i.e. what the agent adds to the process (``rss_mb``, ``idle_cpu_pct``), with
``"in_process_of": "device_plugin"``.

Method: ``gpucaas sandbox`` parts are started with one real node (kubelet, containerd and
runc; every process as in production: the real service code, its real protocols), nothing
is submitted, the
figures are read from ``/proc/<pid>/status`` and ``/proc/<pid>/stat`` of each daemon's
process (the supervisor's child). Targets: under 60 MB and under 1 % of a core each, since
every GPU node runs these daemons beside its tenants' VMs.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.kit import leaseless_plugin
from benchmarks.kit.procstat import cpu_seconds, pss_mb, rss_mb, threads
from benchmarks.kit.report import emit, say
from benchmarks.kit.sandbox import sandbox

RSS_TARGET_MB = 60.0
CPU_TARGET_PCT = 1.0
PRODUCTION_DAEMONS = ("device_plugin", "fabric")
#: the extended resource the second, lease-less device plugin registers with the same kubelet (short:
#: its socket is named after it, and a unix socket path must stay under 108 bytes)
ALONE_RESOURCE = "gpucaas.dev/fp"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter settle and idle windows")
    args = parser.parse_args(argv)
    settle_s, idle_s = (5.0, 10.0) if args.quick else (20.0, 60.0)

    with sandbox("gpucaas-fp-", nodes=("gpu-node-a",)) as sb:
        node = sb.nodes[0]
        with leaseless_plugin.beside_kubelet(sb, node, sb.state_dir / "alone", resource=ALONE_RESOURCE) as alone:
            time.sleep(settle_s)  # a benchmark, not a test: let start-up work finish
            wanted = {
                "device_plugin": "device-plugin-gpu-node-a",
                "fabric": "fabric-gpu-node-a",
            }
            pids: dict[str, int] = {}
            for key, name in wanted.items():
                pid = sb.supervisor.pid(name) if name in sb.supervisor.children else None
                if pid is not None:
                    pids[key] = pid
            kubelet_pid = sb.real_nodes[node.name].pid("kubelet")
            assert kubelet_pid is not None, "the node's kubelet is not running"
            pids["kubelet"] = kubelet_pid
            pids["device_plugin_alone"] = alone.pid
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(idle_s)
            wall = time.monotonic() - t0
            daemons: dict[str, dict[str, Any]] = {
                k: {
                    "rss_mb": round(rss_mb(p), 1),
                    "pss_mb": pss_mb(p),
                    "idle_cpu_pct": round(100 * (cpu_seconds(p) - before[k]) / wall, 2),
                    "threads": threads(p),
                }
                for k, p in pids.items()
            }
    with_agent, without = daemons["device_plugin"], daemons.pop("device_plugin_alone")
    lease_agent = {
        "in_process_of": "device_plugin",
        "rss_mb": round(with_agent["rss_mb"] - without["rss_mb"], 1),
        "idle_cpu_pct": round(with_agent["idle_cpu_pct"] - without["idle_cpu_pct"], 2),
    }
    prod = [daemons[k] for k in PRODUCTION_DAEMONS if k in daemons]
    result = {
        "daemons": daemons,
        "device_plugin_alone": without,
        "lease_agent": lease_agent,
        "rss_mb_max": max(d["rss_mb"] for d in prod),
        "idle_cpu_pct_max": max(d["idle_cpu_pct"] for d in prod),
        "targets_met": {
            f"rss_mb<{RSS_TARGET_MB:g}": all(d["rss_mb"] < RSS_TARGET_MB for d in prod),
            f"idle_cpu_pct<{CPU_TARGET_PCT:g}": all(d["idle_cpu_pct"] < CPU_TARGET_PCT for d in prod),
        },
        "idle_window_s": idle_s,
        "quick": args.quick,
    }
    for name, d in {**daemons, "device_plugin_alone": without}.items():
        say(
            f"{name}: {d['rss_mb']} MB resident ({d['pss_mb']} MB proportional), {d['idle_cpu_pct']} % of a "
            f"core idle, {d['threads']} threads"
        )
    say(
        f"lease agent (in the device plugin's process): +{lease_agent['rss_mb']} MB, "
        f"+{lease_agent['idle_cpu_pct']} % of a core"
    )
    emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
