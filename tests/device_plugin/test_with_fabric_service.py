"""The plugin and the node's fabric service together (the ``fabric`` fixture: the real
services.fabric over its unix socket, on the Fabric Manager simulator): what Fabric Manager
holds active follows the pods, and its NVLink reports reach the kubelet."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core import topology
from devtools.fake_sysfs import FakeBoard
from services.device_plugin.main import DevicePlugin
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import AdmissionError, FakeKubelet


def test_allocations_activate_real_partitions(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric, hgx_board: FakeBoard
) -> None:
    pid = {g.bdf: g.physical_id for g in hgx_board.gpus}
    assert plugin.core.physical_map.source == "fabric-manager"
    assert plugin.core.physical_map.by_bdf == pid
    quad = fake_kubelet.admit("tenant-a", "quad", "nvidia.com/gpu", 4)
    pair = fake_kubelet.admit("tenant-b", "pair", "nvidia.com/gpu", 2)
    parts = {topology.partition_for(pid[b] for b in a.device_ids).id for a in (quad, pair)}
    assert set(fabric.fm.active_partition_ids()) == parts
    assert quad.response.envs["GPUCAAS_NVLINK"] == "true"
    # A set overlapping the active quad is refused by the fabric service, and so is Allocate.
    with pytest.raises(AdmissionError, match="ABORTED"):
        fake_kubelet.admit("tenant-c", "x", "nvidia.com/gpu", 1, devices=[quad.device_ids[0]])


def test_pod_gone_partition_released_by_sync(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    plugin.usage.stop()
    plugin.usage.grace = 0.0
    fake_kubelet.admit("tenant-a", "quad", "nvidia.com/gpu", 4)
    plugin.usage.scan()
    assert len(fabric.fm.active_partition_ids()) == 1
    fake_kubelet.remove_pod("tenant-a", "quad")
    plugin.usage.scan()
    assert fabric.fm.active_partition_ids() == frozenset()


def test_nvlink_failure_reported_unhealthy(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric, hgx_board: FakeBoard
) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    gpu = next(g for g in hgx_board.gpus if g.physical_id == 6)
    fabric.fm.inject_gpu_nvlink_failure(6, ports=(3,))
    assert conn.wait_for(lambda c: c.health()[gpu.bdf] == "Unhealthy", timeout=10)
    fabric.fm.clear_gpu_nvlink_failure(6)
    assert conn.wait_for(lambda c: c.health()[gpu.bdf] == "Healthy", timeout=10)


def test_allocate_waits_for_a_fabric_service_that_restarts(
    hgx_board: FakeBoard,
    fake_kubelet: FakeKubelet,
    make_settings: Any,
    run_plugin: Any,
    socket_dir: Path,
    tmp_path: Path,
) -> None:
    """The kubelet never retries a failed Allocate (the pod fails: UnexpectedAdmissionError), so
    a fabric service that is restarting (the chaos soak kills it) is waited for."""
    settings = make_settings(hgx_board, allocate_fabric_wait=30.0)
    fm = SimulatedFabric(hgx_board.physical_id_map())
    store = ActivationStore(tmp_path / "fabric-state").open()

    def serve() -> UnixServer:
        server = UnixServer(create_app(PartitionService(SimulatedFabricManager(fm), store)), settings.fabric_socket)
        server.start()
        return server

    first = serve()
    run_plugin(settings)
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    first.stop()  # gone (killed): Allocate meets no service
    later: list[UnixServer] = []
    back = threading.Timer(1.5, lambda: later.append(serve()))
    back.start()
    try:
        started = time.monotonic()
        alloc = fake_kubelet.admit("tenant-a", "pair", "nvidia.com/gpu", 2)
        assert time.monotonic() - started >= 1.0  # it waited for the service to come back
        assert alloc.response.envs["GPUCAAS_NVLINK"] == "true"
        assert len(fm.active_partition_ids()) == 1
    finally:
        back.join()
        for server in later:
            server.stop()
        store.close()
