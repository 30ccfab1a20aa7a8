"""End to end: the plugin registers, lists 8 GPUs, and a 2-GPU pod gets an NVLink pair."""

from __future__ import annotations

from core import topology
from devtools.fake_sysfs import FakeBoard
from services.device_plugin.main import DevicePlugin
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import FakeKubelet


def test_pod_gets_an_nvlink_pair_as_cdi_devices(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard, fabric: RunningFabric
) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    assert conn.healthy() == sorted(g.bdf for g in hgx_board.gpus)
    alloc = fake_kubelet.admit("tenant-a", "pod-1", "nvidia.com/gpu", 2)
    pid = {g.bdf: g.physical_id for g in hgx_board.gpus}
    assert topology.partition_for(pid[b] for b in alloc.device_ids) is not None
    assert [c.name for c in alloc.response.cdi_devices] == [f"nvidia.com/gpu={b}" for b in alloc.device_ids]
    assert alloc.response.envs["GPUCAAS_NVLINK"] == "true"
    holder = "gpus:" + "+".join(sorted(alloc.device_ids))
    assert holder in fabric.activations()
    part = topology.partition_for(pid[b] for b in alloc.device_ids)
    assert part is not None and fabric.fm.active_partition_ids() == {part.id}
