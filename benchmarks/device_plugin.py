"""Device plugin latency: Allocate and GetPreferredAllocation over the unix socket.

Each is reported as p50/p99 and as a ratio to a bare gRPC round trip measured in
the same run on the same socket and server (``GetDevicePluginOptions``, which
does no work). Allocate includes the partition activation through the fabric
service (the real ``services.fabric`` API over its unix socket with the Fabric
Manager simulator); each timed Allocate activates a fresh partition, released
untimed afterwards. Three processes, as on a node: ``gpucaas device-plugin``, the
fabric service, and this one as the kubelet (registration and calls over the
plugin's socket). Discovery is one sysfs scan of the fake HGX H100 board.

    python -m benchmarks.device_plugin [--quick]

The last stdout line is one JSON object (keys allocate_p99_ms,
allocate_ratio_vs_bare_grpc (Allocate p99 over the bare round trip's p99),
allocate_ratio_vs_bare_p50, preferred_p99_ms, discovery_ms, allocate_target_met
(p99 < 3 ms: the kubelet waits on it for every GPU pod), ...).

The fabric service's activation record is durable before Allocate returns (one
journal append and ``fdatasync`` under ``/tmp``, on this machine's disk), so the
figures include one disk sync per Allocate, as on a node (the chart keeps the
records in /var/lib/gpucaas/fabric); ``disk_sync_p50_ms``/``disk_sync_p99_ms`` time that
sync alone in the same directory and run, to tell the disk's share from the code's.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ALLOCATE_P99_TARGET_MS = 3.0


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def _ms(samples: list[float]) -> dict[str, float]:
    return {"p50": round(_pct(samples, 50) * 1e3, 3), "p99": round(_pct(samples, 99) * 1e3, 3)}


def _serve_fabric(physical_map: Any, work: Path, stop: Any) -> None:
    """The fabric service (FM simulator, durable activation records) on ``work/fabric.sock``."""
    from services.fabric.bookkeeping import ActivationStore
    from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
    from services.fabric.partitions import PartitionService
    from services.fabric.server import UnixServer, create_app

    store = ActivationStore(work / "fabric-state").open()
    server = UnixServer(
        create_app(PartitionService(SimulatedFabricManager(SimulatedFabric(physical_map)), store)), work / "fabric.sock"
    )
    server.start()
    gc.freeze()  # as `gpucaas fabric` does once started (services/fabric/cli.py)
    try:
        stop.wait()
    finally:
        server.stop()
        store.close()


def _wait_for_socket(path: Path, proc: Any, timeout: float = 60.0) -> None:
    from devtools.processes import unix_socket_ready
    from devtools.waiting import wait_for

    listening = unix_socket_ready(path)

    def up() -> bool:
        if not proc.is_alive():
            raise RuntimeError(f"the fabric service exited ({proc.exitcode})")
        return listening()

    wait_for(up, timeout, interval=0.05, what=f"the fabric service on {path}")


def run(quick: bool) -> dict[str, Any]:
    from core import topology, vfio_sysfs as sysfs
    from core.fabric_client import FabricClient
    from devtools.fake_kubelet import FakeKubelet
    from devtools.fake_sysfs import build_hgx_h100
    from services.device_plugin.api import dp_pb2

    n = 2000 if quick else 5000
    rng = random.Random(5)
    work = Path(tempfile.mkdtemp(prefix="gpucaas-bench-", dir="/tmp"))
    stack: list[Any] = []
    try:
        board = build_hgx_h100(work / "node")
        scans = []
        for _ in range(20 if quick else 200):
            t = time.perf_counter()
            sysfs.scan(board.sysfs, board.dev)
            scans.append(time.perf_counter() - t)

        # The fabric service in a process of its own, as on a node: sharing one interpreter
        # lock with the plugin and its client would add the lock's hand-overs to Allocate.
        ctx = multiprocessing.get_context("spawn")
        stop_fabric = ctx.Event()
        fabric_proc = ctx.Process(target=_serve_fabric, args=(board.physical_id_map(), work, stop_fabric), daemon=True)
        fabric_proc.start()

        def stop_fabric_service() -> None:
            stop_fabric.set()
            fabric_proc.join(30)

        stack.append(stop_fabric_service)
        _wait_for_socket(work / "fabric.sock", fabric_proc)
        kubelet = FakeKubelet(work / "dp", work / "pr.sock").start()
        stack.append(kubelet.stop)
        # `gpucaas device-plugin` in its own process too: this one is the kubelet's side only
        env = {
            **os.environ,
            "GPUCAAS_LEASES": "false",
            "GPUCAAS_SYSFS_ROOT": str(board.sysfs),
            "GPUCAAS_DEV_ROOT": str(board.dev),
            "GPUCAAS_FABRIC_SOCKET": str(work / "fabric.sock"),
            "GPUCAAS_POD_RESOURCES_INTERVAL": "3600",
            "GPUCAAS_FABRIC_SYNC_GRACE": "3600",
            "GPUCAAS_LOG_LEVEL": "WARNING",
        }
        plugin = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpucaas",
                "device-plugin",
                "--device-plugin-dir",
                str(work / "dp"),
                "--cdi-dir",
                str(work / "cdi"),
                "--pod-resources-socket",
                str(work / "pr.sock"),
                "--metrics-port",
                "-1",
                "--node-name",
                "bench",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )

        def stop_plugin() -> None:
            plugin.terminate()
            plugin.wait(30)

        stack.append(stop_plugin)
        stub = kubelet.wait_for_plugin("nvidia.com/gpu", timeout=60).stub
        fabric = FabricClient(work / "fabric.sock")
        stack.append(fabric.close)
        bdf_of = board.physical_id_map()  # physical GPU id -> PCI address, as the fabric service maps them

        def timed(fn, count: int) -> list[float]:
            out = []
            for i in range(count):
                t = time.perf_counter()
                fn(i)
                out.append(time.perf_counter() - t)
            return out

        empty = dp_pb2.Empty()
        for _ in range(50):
            stub.GetDevicePluginOptions(empty, timeout=10)  # warm up
        bare = timed(lambda i: stub.GetDevicePluginOptions(empty, timeout=10), n)

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
        preferred = timed(lambda i: stub.GetPreferredAllocation(reqs[i], timeout=10), n)

        shapes = [p for p in topology.HGX_H100_PARTITIONS if p.size in (1, 2, 4, 8)]
        alloc_times: list[float] = []
        for i in range(n):
            part = shapes[i % len(shapes)]
            ids = sorted(bdf_of[g] for g in part.gpus)
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

        # The disk's share: one journal-sized append + fdatasync in the same directory, as each
        # activation's durable record costs (services/fabric/bookkeeping.py).
        fd = os.open(work / "sync-probe", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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
            "fabric": "services.fabric + Fabric Manager simulator over unix socket",
        }
    finally:
        for close in reversed(stack):
            close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (CI smoke run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    result = run(args.quick)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
