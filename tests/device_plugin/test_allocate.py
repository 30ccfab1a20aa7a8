"""Allocate: CDI names, partition activation through the fabric service, and its failures."""

from __future__ import annotations

import logging

import grpc
import pytest

from devtools.fake_sysfs import GPU_BDFS, GPU_PHYSICAL_IDS, FakeBoard
from services.device_plugin.api import dp_pb2
from services.device_plugin.main import DevicePlugin
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import AdmissionError, FakeKubelet

BDF = dict(zip(GPU_PHYSICAL_IDS, GPU_BDFS, strict=True))


def _allocate(fake_kubelet: FakeKubelet, ids: list[str]) -> dp_pb2.AllocateResponse:
    stub = fake_kubelet.plugins["nvidia.com/gpu"].stub
    return stub.Allocate(
        dp_pb2.AllocateRequest(container_requests=[dp_pb2.ContainerAllocateRequest(devices_ids=ids)]), timeout=10
    )


def test_quad_is_activated_and_named_by_cdi(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    quad = [BDF[p] for p in (5, 6, 7, 8)]
    resp = _allocate(fake_kubelet, list(reversed(quad)))
    (c,) = resp.container_responses
    assert [d.name for d in c.cdi_devices] == [f"nvidia.com/gpu={b}" for b in sorted(quad)]
    assert dict(c.envs) == {
        "GPUCAAS_GPU_PCI_ADDRESSES": ",".join(sorted(quad)),
        "GPUCAAS_NVLINK": "true",
        "GPUCAAS_FABRIC_PARTITIONS": "2",
    }
    holder = "gpus:" + "+".join(sorted(quad))
    assert c.annotations["gpucaas.dev/fabric-holder"] == holder
    assert fabric.activations()[holder]["partition_ids"] == [2]
    assert fabric.fm.active_partition_ids() == {2}  # Fabric Manager holds the quad 5-8
    assert not c.devices and not c.mounts  # CDI carries the device nodes
    # Idempotent for the same holder (the kubelet may retry Allocate).
    assert _allocate(fake_kubelet, quad).container_responses[0].envs["GPUCAAS_FABRIC_PARTITIONS"] == "2"


def test_non_partition_set_is_allowed_logged_and_counted(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [BDF[1], BDF[2]]  # {1,2} is not a pair partition
    with caplog.at_level(logging.WARNING):
        (c,) = _allocate(fake_kubelet, ids).container_responses
    assert c.envs["GPUCAAS_NVLINK"] == "false"
    assert c.envs["GPUCAAS_FABRIC_PARTITIONS"] == "7,8"  # one single-GPU partition each
    assert any("form no NVLink partition" in r.getMessage() for r in caplog.records)
    assert (
        'gpucaas_device_plugin_allocations_total{node="gpu-node-1",nvlink="false"} 1.0'
        in plugin.metrics.render().decode()
    )


def test_conflict_fails_allocate_with_the_holder_named(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    fake_kubelet.admit("tenant-a", "big", "nvidia.com/gpu", 4, devices=[BDF[p] for p in (1, 2, 3, 4)])
    with pytest.raises(grpc.RpcError) as err:
        _allocate(fake_kubelet, [BDF[1], BDF[3]])
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "held by gpus:" in err.value.details()


def test_conflict_with_a_pod_that_is_gone_is_resolved_by_sync(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    """The old pod left; its activation lingers until the sync, which the conflict triggers."""
    plugin.usage.stop()  # no periodic sync: only the conflict path may release it
    plugin.usage.grace = 0.0
    fake_kubelet.admit("tenant-a", "old", "nvidia.com/gpu", 4, devices=[BDF[p] for p in (1, 2, 3, 4)])
    fake_kubelet.remove_pod("tenant-a", "old")
    alloc = fake_kubelet.admit("tenant-b", "new", "nvidia.com/gpu", 2, devices=[BDF[1], BDF[3]])
    assert alloc.response.envs["GPUCAAS_FABRIC_PARTITIONS"] == "3"
    assert list(fabric.activations()) == ["gpus:" + "+".join(sorted([BDF[1], BDF[3]]))]
    assert fabric.fm.active_partition_ids() == {3}  # the old quad was deactivated


def test_fabric_manager_down_fails_allocate_clearly(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    fabric.fm.stop()  # the Fabric Manager process goes away (its service VM is down)
    with pytest.raises(
        AdmissionError, match="UNAVAILABLE: cannot activate the NVLink partition for .*Fabric Manager .*unreachable"
    ):
        fake_kubelet.admit("tenant-a", "p", "nvidia.com/gpu", 2)
    assert 'reason="fabric-unavailable"' in plugin.metrics.render().decode()


def test_fabric_socket_missing_fails_allocate_by_default(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    run_plugin(make_settings(hgx_board))  # socket configured, no service behind it
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    with pytest.raises(AdmissionError, match="fabric service socket .* does not exist"):
        fake_kubelet.admit("tenant-a", "p", "nvidia.com/gpu", 1)


def test_without_fabric_allowed_nvlink_less(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    run_plugin(make_settings(hgx_board, fabric_required=False))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    with caplog.at_level(logging.WARNING):
        alloc = fake_kubelet.admit("tenant-a", "p", "nvidia.com/gpu", 2)
    assert alloc.response.envs["GPUCAAS_NVLINK"] == "false"
    assert "GPUCAAS_FABRIC_PARTITIONS" not in alloc.response.envs
    assert any("WITHOUT partition activation" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("ids", "code", "message"),
    [
        (["0000:00:00.0"], grpc.StatusCode.INVALID_ARGUMENT, "unknown device id"),
        ([], grpc.StatusCode.INVALID_ARGUMENT, "devices_ids is empty"),
        (["0000:05:00.0"], grpc.StatusCode.INVALID_ARGUMENT, "unknown device id"),  # an NVSwitch
    ],
    ids=["unknown", "empty", "nvswitch"],
)
def test_bad_allocate_requests(plugin: DevicePlugin, fake_kubelet: FakeKubelet, ids, code, message) -> None:
    with pytest.raises(grpc.RpcError) as err:
        _allocate(fake_kubelet, ids)
    assert err.value.code() == code and message in err.value.details()


def test_fabric_map_replaces_pci_order(plugin: DevicePlugin) -> None:
    pmap = plugin.core.physical_map
    assert pmap.source == "fabric-manager"
    assert pmap.physical(GPU_BDFS[0]) == 2  # PCI order would say 1
    text = plugin.metrics.render().decode()
    assert 'gpucaas_device_plugin_topology_source{node="gpu-node-1",source="fabric-manager"} 1.0' in text


def test_pci_order_fallback_logged_and_exported(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        p = run_plugin(make_settings(hgx_board, fabric_socket=""))
    assert p.core.physical_map.source == "pci-order"
    assert any("physical GPU ids from PCI order" in r.getMessage() for r in caplog.records)
    assert 'source="pci-order"' in p.metrics.render().decode()


def test_learnt_map_kept_through_fabric_outage(
    plugin: DevicePlugin, fabric: RunningFabric, fake_kubelet: FakeKubelet
) -> None:
    before = plugin.core.physical_map
    fabric.fm.stop()
    plugin.core.refresh_fabric()
    assert plugin.core.physical_map == before and before.source == "fabric-manager"
    assert 'gpucaas_device_plugin_fabric_reachable{node="gpu-node-1"} 0.0' in plugin.metrics.render().decode()


def test_conflict_with_a_pod_that_just_ended_is_released_not_aborted(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    """A pod cancelled right after it started: its activation is younger than the sync's
    grace, so the sync keeps it; the kubelet hands its GPUs to a new pod, and Allocate
    releases the stale activation instead of failing for good with ABORTED."""
    plugin.usage.stop()
    assert plugin.usage.grace >= 30  # a young activation survives the sync
    fake_kubelet.admit("tenant-a", "cancelled", "nvidia.com/gpu", 4, devices=[BDF[p] for p in (1, 2, 3, 4)])
    fake_kubelet.remove_pod("tenant-a", "cancelled")
    alloc = fake_kubelet.admit("tenant-b", "next", "nvidia.com/gpu", 2, devices=[BDF[1], BDF[3]])
    assert alloc.response.envs["GPUCAAS_FABRIC_PARTITIONS"] == "3"
    assert list(fabric.activations()) == ["gpus:" + "+".join(sorted([BDF[1], BDF[3]]))]


def test_a_live_pod_is_never_released_and_allocate_fails_within_the_bound(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, fabric: RunningFabric, make_settings, run_plugin
) -> None:
    run_plugin(make_settings(hgx_board, allocate_conflict_wait=0.5))
    fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    fake_kubelet.admit("tenant-a", "big", "nvidia.com/gpu", 4, devices=[BDF[p] for p in (1, 2, 3, 4)])
    big = "gpus:" + "+".join(sorted(BDF[p] for p in (1, 2, 3, 4)))
    with pytest.raises(grpc.RpcError) as err:
        _allocate(fake_kubelet, [BDF[1], BDF[3]])
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert big in fabric.activations()  # the live pod keeps its partition
