"""Device plugin latency beside a real kubelet: Allocate and GetPreferredAllocation over the plugin's socket.

Set-up: ``gpucaas sandbox`` with one real node (the pinned kubelet with containerd and runc,
the node's own device plugin and its fabric service: the real ``services.fabric`` with the
Fabric Manager simulator, on the fake HGX H100 board). Beside them a second ``gpucaas
device-plugin``, leases off, registers with the node's real kubelet under a resource of its
own (``benchmarks.kit.leaseless_plugin``, as ``benchmarks.footprint`` runs it); the calls
start once the kubelet offers that resource, i.e. once it has dialled the plugin, asked its
options and holds its ListAndWatch stream.

This process then calls the plugin on its socket as the kubelet's device manager does while it
admits a pod (the kubelet makes these calls only then, one pod at a time: thousands of them
need a caller of their own), each call timed: ``GetPreferredAllocation`` over random free sets, and
``Allocate`` of a whole partition of 1, 2, 4 or 8 GPUs, which includes the partition's
activation through the node's fabric service (its HTTP API on its unix socket); each timed
Allocate activates a fresh partition, released untimed afterwards. Each is reported as
p50/p99 and as a ratio to a bare gRPC round trip on the same socket and server
(``GetDevicePluginOptions``, which does no work). The benchmark's plugin spaces out its own
PodResources scans and fabric sync (an hour apart: outside the measurement); everything else
on the node and the control plane keeps running on the same cores, idle: the node's own
device plugin scans PodResources every second, its lease agent runs its rounds. Discovery is
one sysfs scan of the node's board.

    python -m benchmarks.device_plugin [--quick]

The last stdout line is one JSON object (keys allocate_p99_ms,
allocate_ratio_vs_bare_grpc (Allocate p99 over the bare round trip's p99),
allocate_ratio_vs_bare_p50, preferred_p99_ms, discovery_ms, allocate_target_met
(p99 < 3 ms: the kubelet waits on it for every GPU pod), ...).

The fabric service's activation record is durable before Allocate returns (one journal
append and ``fdatasync`` in the node's fabric state folder, under ``/tmp`` on this machine's
disk), so the figures include one disk sync per Allocate, as on a node (the chart keeps the
records in /var/lib/gpucaas/fabric); ``disk_sync_p50_ms``/``disk_sync_p99_ms`` time that sync
alone in the same folder and run, to tell the disk's share from the code's.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.kit import leaseless_plugin
from benchmarks.kit.report import emit, percentile
from benchmarks.kit.sandbox import sandbox

ALLOCATE_P99_TARGET_MS = 3.0
#: the resource the benchmark's plugin registers with the node's kubelet (short: its socket is named after it)
RESOURCE = "gpucaas.dev/dp"
#: its own background work spaced out beyond the run, and its log kept to warnings
QUIET = {
    "GPUCAAS_POD_RESOURCES_INTERVAL": "3600",
    "GPUCAAS_FABRIC_SYNC_GRACE": "3600",
    "GPUCAAS_LOG_LEVEL": "WARNING",
}


def _ms(samples: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(samples, 0.5) * 1e3, 3), "p99": round(percentile(samples, 0.99) * 1e3, 3)}


def _timed(fn: Callable[[int], object], count: int) -> list[float]:
    out = []
    for i in range(count):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def run(quick: bool) -> dict[str, Any]:
    import grpc

    from core import topology, vfio_sysfs as sysfs
    from core.fabric_client import FabricClient
    from devtools.fake_sysfs import load_board
    from services.device_plugin.api import dp_grpc, dp_pb2

    n = 2000 if quick else 5000
    rng = random.Random(5)
    with sandbox("gpucaas-dp-", nodes=("gpu-node-a",)) as sb:
        node = sb.nodes[0]
        scans = _timed(lambda _: sysfs.scan(node.sysfs, node.dev), 20 if quick else 200)
        bdf_of = load_board(node.board).physical_id_map()  # physical GPU id -> PCI address, as the fabric maps them
        with (
            leaseless_plugin.beside_kubelet(sb, node, sb.state_dir / "bench-plugin", resource=RESOURCE, env=QUIET),
            grpc.insecure_channel(f"unix://{leaseless_plugin.socket_of(node, RESOURCE)}") as channel,
            FabricClient(node.fabric_socket) as fabric,
        ):
            stub = dp_grpc.DevicePluginStub(channel)
            empty = dp_pb2.Empty()
            for _ in range(50):
                stub.GetDevicePluginOptions(empty, timeout=10)  # warm up
            bare = _timed(lambda i: stub.GetDevicePluginOptions(empty, timeout=10), n)

            gpus = sorted(bdf_of.values())
            reqs = []
            for _ in range(n):
                free = [b for b in gpus if rng.random() < 0.7] or gpus[:1]
                reqs.append(
                    dp_pb2.PreferredAllocationRequest(
                        container_requests=[
                            dp_pb2.ContainerPreferredAllocationRequest(
                                available_deviceIDs=free, allocation_size=rng.randint(1, len(free))
                            )
                        ]
                    )
                )
            preferred = _timed(lambda i: stub.GetPreferredAllocation(reqs[i], timeout=10), n)

            shapes = [p for p in topology.HGX_H100_PARTITIONS if p.size in (1, 2, 4, 8)]
            alloc_times: list[float] = []
            for i in range(n):
                ids = sorted(bdf_of[g] for g in shapes[i % len(shapes)].gpus)
                req = dp_pb2.AllocateRequest(container_requests=[dp_pb2.ContainerAllocateRequest(devices_ids=ids)])
                t = time.perf_counter()
                stub.Allocate(req, timeout=10)
                alloc_times.append(time.perf_counter() - t)
                fabric.release("gpus:" + "+".join(ids))

            # The fabric service's share of Allocate: the same activations straight through FabricClient.
            direct: list[float] = []
            for i in range(n):
                ids = sorted(bdf_of[g] for g in shapes[i % len(shapes)].gpus)
                holder = "gpus:" + "+".join(ids)
                t = time.perf_counter()
                fabric.activate(holder, ids)
                direct.append(time.perf_counter() - t)
                fabric.release(holder)

        # The disk's share: one journal-sized append + fdatasync in the fabric's state folder, as
        # each activation's durable record costs (services/fabric/bookkeeping.py).
        fd = os.open(node.fabric_state_dir / "sync-probe", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        syncs: list[float] = []
        try:
            for _ in range(n):
                t = time.perf_counter()
                os.write(fd, b"x" * 400 + b"\n")
                os.fdatasync(fd)
                syncs.append(time.perf_counter() - t)
        finally:
            os.close(fd)

    b, a, p, f, d = _ms(bare), _ms(alloc_times), _ms(preferred), _ms(direct), _ms(syncs)
    return {
        "iterations": n,
        "bare_p50_ms": b["p50"],
        "bare_p99_ms": b["p99"],
        "allocate_p50_ms": a["p50"],
        "allocate_p99_ms": a["p99"],
        "allocate_ratio_vs_bare_grpc": round(a["p99"] / b["p99"], 2),
        "allocate_ratio_vs_bare_p50": round(a["p50"] / b["p50"], 2),
        "allocate_target_met": a["p99"] < ALLOCATE_P99_TARGET_MS,
        "preferred_p50_ms": p["p50"],
        "preferred_p99_ms": p["p99"],
        "preferred_ratio_vs_bare_p50": round(p["p50"] / b["p50"], 2),
        "fabric_activate_p50_ms": f["p50"],
        "fabric_activate_p99_ms": f["p99"],
        "discovery_ms": round(statistics.median(scans) * 1e3, 3),
        "disk_sync_p50_ms": d["p50"],
        "disk_sync_p99_ms": d["p99"],
        "fabric": "the node's fabric service (services.fabric, Fabric Manager simulator) over its unix socket",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    emit(run(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
