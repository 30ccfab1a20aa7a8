"""Fabric replay benchmark: Fabric Manager restart -> partitions replayed (and, with
``--event vm-crash``, service VM crash -> fabric reset handled), in seconds.

Run: ``python -m benchmarks.fabric_replay [--quick] [--event fm-restart|vm-crash]
[--driver auto|libvirtd|test] [--silent-s S]``. The last line of stdout is one JSON object.

``--event fm-restart`` (the default; what FM's resiliency covers): a full ``FabricNode``
with the production wiring -- the nvfm backend over the compiled C double of libnvfm
(tests/fabric/fabric_manager/libnvfm_fake, H100 mode), each call bounded by
``fm_call_deadline_s`` (5 s) and the reconcile loop every ``reconcile_interval_s`` (5 s).
Three partitions are active. Each run: Fabric Manager goes silent for ``--silent-s``
seconds (every call blocks, as a hung FM makes libnvfm block ~70 s), then restarts in
restart mode (``FABRIC_MODE_RESTART=1``), which exits after 60 s without the activated
list. ``replay_s`` is restart -> the list replayed and the partitions active again;
``within_fm_window`` says it beat the 60 s. ``hang_to_replay_s`` counts from the hang.

``--event vm-crash`` (below, the original method): the service VM is killed; since a VM
restart resets the NVSwitches this is a fabric reset, not a replay: ``reset_s`` is the
time until the watcher restarted the VM and the records were marked lost.

Method: a full ``FabricNode`` (records on disk, local API on a unix socket, the VM
watcher, the reconcile loop) runs the service VM with the production defaults for
watching and restarting (libvirt lifecycle events plus a 1 s poll, first restart
after ``restart_backoff_initial_s`` = 1 s). Through the local API it activates three
partitions (a quad, a pair, a single). Then each run:

1. kills the VM's QEMU process with SIGKILL (real libvirtd), or destroys the domain
   (``test:///default`` driver, when libvirtd/QEMU/the test image are unavailable);
2. waits until the watcher has restarted the domain and the partitions are active
   again in Fabric Manager, equal to the records -> ``replay_s`` is that time;
3. (real libvirtd) also waits for the guest's console to show it booted ->
   ``guest_ready_s``: a real Fabric Manager inside the VM can only take the
   replay after that, so ``guest_ready_s`` is the floor of a production replay.

Fabric Manager is the simulator standing for "FM inside the VM" (it cannot run in
the test VM here): the VM restart restarts it and the service replays into it.
The VM is the test image (Debian cloud kernel + busybox initramfs) under QEMU
software emulation (``type='qemu'``) without PCI passthrough.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from core.fabric_client import FabricClient, holder_for_gpus
from devtools.waiting import wait_for
from services.fabric.fabric_manager.simulator import (
    SimulatedFabric,
    SimulatedFabricManager,
    default_gpu_map,
)
from services.fabric.main import FabricNode
from services.fabric.settings import FabricSettings

GPU = default_gpu_map()
SETS = [(1, 2, 3, 4), (5, 7), (6,)]


def fm_restart(runs: int, silent_s: float) -> dict[str, Any]:
    import ctypes
    import shutil
    import subprocess

    from devtools.fake_sysfs import build_hgx_h100
    from services.fabric.fabric_manager.nvfm import load_libnvfm

    tmp = Path(tempfile.mkdtemp(prefix="fabric-bench-fm-"))
    src = Path(__file__).resolve().parent.parent / "tests/fabric/fabric_manager/libnvfm_fake/nvfm_fake.c"
    lib_path = tmp / "libnvfm.so.535.216.01"
    subprocess.run(
        [
            shutil.which("gcc") or "gcc",
            "-std=c11",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-o",
            str(lib_path),
            str(src),
        ],
        check=True,
    )
    lib = load_libnvfm(lib_path)
    lib.fakeFmStall.argtypes = [ctypes.c_int]
    lib.fakeFmReset()
    lib.fakeFmSetH100(1)
    board = build_hgx_h100(tmp / "board")
    settings = FabricSettings(
        node_name="bench-node",
        socket=tmp / "fabric.sock",
        state_dir=tmp / "state",
        fm_backend="nvfm",
        fm_library=lib_path,
        vm_enabled=False,
        publish=False,
        sysfs_root=board.sysfs,
    )
    node = FabricNode(settings)
    gpu = board.physical_id_map()
    replay: list[float] = []
    from_hang: list[float] = []
    want = {1, 5, 12}
    try:
        node.start()
        with FabricClient(settings.socket) as c:
            for s in SETS:
                c.activate(holder_for_gpus(gpu[g] for g in s), [gpu[g] for g in s])

        def active() -> set[int]:
            return {i for i in range(15) if lib.fakeFmIsActive(i) == 1}

        assert active() == want, active()
        for _ in range(runs):
            before = node.service.status.replays
            t_hang = time.monotonic()
            lib.fakeFmStall(-1)  # FM silent: every call blocks
            time.sleep(silent_s)
            lib.fakeFmStop()
            lib.fakeFmStart(1)  # back in restart mode: waits 60 s for the activated list
            lib.fakeFmStall(0)
            t0 = time.monotonic()

            def replayed(before: int = before) -> bool:
                return node.service.status.replays > before and not lib.fakeFmAwaitingList() and active() == want

            wait_for(replayed, 120, interval=0.01, what="replay after the FM restart")
            replay.append(time.monotonic() - t0)
            from_hang.append(time.monotonic() - t_hang)
            assert lib.fakeFmRunning() == 1
    finally:
        lib.fakeFmStall(0)
        node.stop()
    median = statistics.median(replay)
    return {
        "event": "fm-restart",
        "replay_s": round(median, 3),
        "replay_runs_s": [round(x, 3) for x in replay],
        "hang_to_replay_s": [round(x, 3) for x in from_hang],
        "within_fm_window": max(replay) < 60.0,
        "fm_restart_window_s": 60,
        "silent_s": silent_s,
        "fm_call_deadline_s": settings.fm_call_deadline_s,
        "reconcile_interval_s": settings.reconcile_interval_s,
        "fabric_manager": "nvfm binding over the compiled libnvfm C double (H100 mode, restart mode)",
        "partitions_replayed": sorted(want),
    }


def run(driver: str, runs: int) -> dict[str, Any]:
    daemon = image = None
    if driver in ("auto", "libvirtd"):
        from vm_images.test_image import ImageBuildError, build_test_image
        from vm_images.test_image.daemon import DaemonUnavailable, PrivateLibvirtd

        try:
            image = build_test_image()
            daemon = PrivateLibvirtd().start()
        except (DaemonUnavailable, ImageBuildError) as exc:
            if driver == "libvirtd":
                raise
            print(f"libvirtd unavailable ({exc}); using test:///default", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="fabric-bench-"))
    from devtools.fake_sysfs import build_hgx_h100

    board = build_hgx_h100(tmp / "board")  # GPUs are reset through its sysfs before activation
    name = f"gpucaas-fabric-bench-{os.getpid()}"
    real = daemon is not None and image is not None
    console = (daemon.workdir / "console.log") if daemon is not None and daemon.workdir is not None else None
    settings = FabricSettings(
        node_name="bench-node",
        socket=tmp / "fabric.sock",
        state_dir=tmp / "state",
        fm_backend="simulator",
        libvirt_uri=daemon.uri if daemon is not None else "test:///default",
        domain_type="qemu" if real else "test",
        domain_name=name,
        vcpus=1,
        memory_mib=256,
        kernel=image.kernel if image is not None else None,
        initrd=image.initrd if image is not None else None,
        disk_image=None if real else tmp / "none.qcow2",
        kernel_cmdline="console=ttyS0 panic=-1",
        fm_channel="none",
        passthrough=False,
        console_log=console,
        publish=False,
        stop_vm_on_exit=True,
        stop_timeout_s=3,
        restart_stable_s=1.0,
        sysfs_root=board.sysfs,
    )
    fabric = SimulatedFabric(h100=True)
    node = FabricNode(settings, fm=SimulatedFabricManager(fabric))
    replay: list[float] = []
    ready: list[float] = []
    try:
        node.start()
        vm = node.vm
        assert vm is not None
        if console is not None:
            wait_for(
                lambda: console.exists() and "gpucaas-test-vm: up" in console.read_text(errors="replace"),
                180,
                interval=0.01,
                what="first boot",
            )
        with FabricClient(settings.socket) as c:
            for s in SETS:
                c.activate(holder_for_gpus(GPU[g] for g in s), [GPU[g] for g in s])
        want = set(fabric.active_partition_ids())
        for i in range(runs):
            if i:  # the holders of the last run lost their partitions: new pods take them again
                with FabricClient(settings.socket) as c:
                    c.sync([], grace_seconds=0)
                    for s in SETS:
                        c.activate(holder_for_gpus(GPU[g] for g in s), [GPU[g] for g in s])
            before = node.vm_restart_replays
            boots = console.read_text(errors="replace").count("gpucaas-test-vm: up") if console else 0
            t0 = time.monotonic()
            if daemon is not None:
                pid = daemon.qemu_pid(name)
                assert pid is not None, "the service VM's QEMU runs"
                os.kill(pid, signal.SIGKILL)
            else:
                import libvirt

                conn = libvirt.open("test:///default")
                conn.lookupByName(name).destroy()
                conn.close()

            # A VM restart is a fabric reset: handled when the VM is back and the records lost.
            def reset_handled(before: int = before) -> bool:
                return (
                    node.vm_restart_replays > before
                    and not fabric.active_partition_ids()
                    and len(node.store.book.lost()) == len(SETS)
                )

            wait_for(reset_handled, 300, interval=0.01, what="restart + reset")
            replay.append(time.monotonic() - t0)
            if console is not None:

                def booted(console: Path = console, boots: int = boots) -> bool:
                    return console.read_text(errors="replace").count("gpucaas-test-vm: up") > boots

                wait_for(booted, 300, interval=0.01, what="guest boot")
                ready.append(time.monotonic() - t0)
            # Every run measures a first crash: wait for the backoff streak to reset
            # (the VM stayed up restart_stable_s).
            wait_for(lambda: vm.state()["crash_streak"] == 0, 60, interval=0.01, what="backoff reset")
    finally:
        node.stop()
        if node.vm is not None:
            node.vm.undefine()
        if daemon is not None:
            daemon.stop()
    out: dict[str, Any] = {
        "event": "vm-crash",
        "reset_s": round(statistics.median(replay), 3),
        "reset_runs_s": [round(x, 3) for x in replay],
        "driver": "libvirtd+qemu (type=qemu, TCG)" if real else "test:///default",
        "fabric_manager": "simulator (stands for FM inside the VM)",
        "partitions_lost": sorted(want),
        "watch_interval_s": settings.watch_interval_s,
        "vm_events": settings.vm_events,
        "restart_backoff_initial_s": settings.restart_backoff_initial_s,
    }
    if ready:
        out["guest_ready_s"] = round(statistics.median(ready), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one crash instead of three")
    ap.add_argument("--driver", choices=["auto", "libvirtd", "test"], default="auto")
    ap.add_argument("--event", choices=["fm-restart", "vm-crash"], default="fm-restart")
    ap.add_argument(
        "--silent-s",
        type=float,
        default=12.0,
        help="fm-restart: how long FM is silent before it restarts (default 12 s)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    runs = 1 if args.quick else 3
    result = fm_restart(runs, args.silent_s) if args.event == "fm-restart" else run(args.driver, runs)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
