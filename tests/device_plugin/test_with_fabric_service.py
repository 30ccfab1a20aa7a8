"""The plugin and the node's fabric service together (the ``fabric`` fixture: the real
services.fabric over its unix socket, on the Fabric Manager simulator): what Fabric Manager
holds active follows the pods, and its NVLink reports reach the kubelet."""

from __future__ import annotations

import pytest

from gpucaas.core import topology
from gpucaas.devtools.fake_kubelet import AdmissionError, FakeKubelet
from gpucaas.devtools.fake_sysfs import FakeBoard
from services.device_plugin.main import DevicePlugin
from tests.device_plugin.conftest import RunningFabric


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
