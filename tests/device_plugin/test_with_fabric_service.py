"""Integration: the plugin against the real fabric service (services.fabric) and its FM simulator.

The rest of this folder uses ``fabric_double`` (the documented contract, kept
small and deterministic); this file runs the same path through the real
service: FastAPI over a unix socket, PartitionService, the simulated Fabric Manager.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucaas.core import topology
from gpucaas.devtools.fake_kubelet import AdmissionError, FakeKubelet
from gpucaas.devtools.fake_sysfs import FakeBoard

fabric_sim = pytest.importorskip("services.fabric.fabric_manager.simulator")
from services.fabric.bookkeeping import ActivationStore  # noqa: E402
from services.fabric.partitions import PartitionService  # noqa: E402
from services.fabric.server import UnixServer, create_app  # noqa: E402


@pytest.fixture
def fm_fabric(hgx_board: FakeBoard):
    return fabric_sim.SimulatedFabric(hgx_board.physical_id_map())


@pytest.fixture
def fabric_service(fm_fabric, socket_dir: Path, tmp_path: Path) -> Iterator[UnixServer]:
    store = ActivationStore(tmp_path / "fabric-state").open()
    service = PartitionService(fabric_sim.SimulatedFabricManager(fm_fabric), store)
    server = UnixServer(create_app(service), socket_dir / "fabric.sock")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        store.close()


@pytest.fixture
def real_plugin(hgx_board: FakeBoard, fabric_service: UnixServer, fake_kubelet: FakeKubelet, make_settings,
                run_plugin):
    p = run_plugin(make_settings(hgx_board))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    return p


def test_allocations_activate_real_partitions(real_plugin, fake_kubelet: FakeKubelet, fm_fabric,
                                              hgx_board: FakeBoard) -> None:
    pid = {g.bdf: g.physical_id for g in hgx_board.gpus}
    assert real_plugin.core.physical_map.source == "fabric-manager"
    assert real_plugin.core.physical_map.by_bdf == pid
    quad = fake_kubelet.admit("tenant-a", "quad", "nvidia.com/gpu", 4)
    pair = fake_kubelet.admit("tenant-b", "pair", "nvidia.com/gpu", 2)
    parts = {topology.partition_for(pid[b] for b in a.device_ids).id for a in (quad, pair)}
    assert set(fm_fabric.active_partition_ids()) == parts
    assert quad.response.envs["GPUCAAS_NVLINK"] == "true"
    # A set overlapping the active quad is refused by the fabric service, and so is Allocate.
    with pytest.raises(AdmissionError, match="ABORTED"):
        fake_kubelet.admit("tenant-c", "x", "nvidia.com/gpu", 1, devices=[quad.device_ids[0]])


def test_pod_gone_partition_released_by_sync(real_plugin, fake_kubelet: FakeKubelet, fm_fabric) -> None:
    real_plugin.usage.stop()
    real_plugin.usage.grace = 0.0
    fake_kubelet.admit("tenant-a", "quad", "nvidia.com/gpu", 4)
    real_plugin.usage.scan()
    assert len(fm_fabric.active_partition_ids()) == 1
    fake_kubelet.remove_pod("tenant-a", "quad")
    real_plugin.usage.scan()
    assert fm_fabric.active_partition_ids() == frozenset()


def test_nvlink_failure_reported_unhealthy(real_plugin, fake_kubelet: FakeKubelet, fm_fabric,
                                           hgx_board: FakeBoard) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    gpu = next(g for g in hgx_board.gpus if g.physical_id == 6)
    fm_fabric.inject_gpu_nvlink_failure(6, ports=(3,))
    assert conn.wait_for(lambda c: c.health()[gpu.bdf] == "Unhealthy", timeout=10)
    fm_fabric.clear_gpu_nvlink_failure(6)
    assert conn.wait_for(lambda c: c.health()[gpu.bdf] == "Healthy", timeout=10)
