"""PodResources: GPUs by state and by namespace/pod in metrics; the fabric's live-holder sync."""

from __future__ import annotations

import pytest

from devtools.fake_sysfs import GPU_BDFS, FakeBoard
from services.device_plugin.api import pr_pb2
from services.device_plugin.main import DevicePlugin
from services.device_plugin.podresources import PodResourcesReader, PodResourcesUnavailable
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import FakeKubelet


def test_metrics_by_state_and_pod(plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard) -> None:
    a = fake_kubelet.admit("tenant-acme", "train-0", "nvidia.com/gpu", 2)
    fake_kubelet.admit("tenant-beta", "notebook", "nvidia.com/gpu", 1)
    hgx_board.remove_vfio_node(GPU_BDFS[7])
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    assert conn.wait_for(lambda c: c.health()[GPU_BDFS[7]] == "Unhealthy")
    containers = plugin.usage.scan()
    assert {(c.namespace, c.pod) for c in containers} == {("tenant-acme", "train-0"), ("tenant-beta", "notebook")}
    text = plugin.metrics.render().decode()
    assert 'gpucaas_device_plugin_gpus{node="gpu-node-1",state="allocated"} 3.0' in text
    assert 'gpucaas_device_plugin_gpus{node="gpu-node-1",state="unhealthy"} 1.0' in text
    assert 'gpucaas_device_plugin_gpus{node="gpu-node-1",state="free"} 4.0' in text
    assert 'gpucaas_device_plugin_namespace_gpus{namespace="tenant-acme",node="gpu-node-1"} 2.0' in text
    for b in a.device_ids:
        assert f'gpu="{b}",namespace="tenant-acme"' in text and 'pod="train-0"' in text


def test_sync_releases_partitions_of_pods_gone(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric
) -> None:
    plugin.usage.stop()  # scans below are explicit
    a = fake_kubelet.admit("tenant-acme", "train-0", "nvidia.com/gpu", 4)
    b = fake_kubelet.admit("tenant-acme", "train-1", "nvidia.com/gpu", 2)
    holder_a = "gpus:" + "+".join(a.device_ids)
    holder_b = "gpus:" + "+".join(b.device_ids)
    plugin.usage.scan()
    assert fabric.activations()[holder_a]["pod"] == "tenant-acme/train-0"
    fake_kubelet.remove_pod("tenant-acme", "train-0")
    plugin.usage.scan()
    assert set(fabric.activations()) == {holder_a, holder_b}  # younger than the grace period: kept
    plugin.usage.grace = 0.0  # pretend it aged
    plugin.usage.scan()
    held = fabric.activations()
    assert list(held) == [holder_b] and held[holder_b]["pod"] == "tenant-acme/train-1"
    assert len(fabric.fm.active_partition_ids()) == 1  # the quad is deactivated, the pair stays


def test_pod_resources_get_and_allocatable(plugin: DevicePlugin, fake_kubelet: FakeKubelet) -> None:
    import grpc

    from services.device_plugin.api import pr_grpc

    fake_kubelet.admit("tenant-acme", "train-0", "nvidia.com/gpu", 1)
    with grpc.insecure_channel(f"unix://{fake_kubelet.pod_resources_socket}") as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        got = stub.Get(pr_pb2.GetPodResourcesRequest(pod_name="train-0", pod_namespace="tenant-acme"), timeout=5)
        assert got.pod_resources.containers[0].devices[0].resource_name == "nvidia.com/gpu"
        alloc = stub.GetAllocatableResources(pr_pb2.AllocatableResourcesRequest(), timeout=5)
        assert sorted(alloc.devices[0].device_ids) == list(GPU_BDFS)
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(pr_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace="x"), timeout=5)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_missing_pod_resources_socket_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(PodResourcesUnavailable, match="does not exist"):
        PodResourcesReader(tmp_path / "none.sock").list()


def test_a_containers_devices_are_one_holder_though_the_kubelet_lists_each_apart(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet
) -> None:
    """The kubelet's List answers one ContainerDevices per device; the reader (and so the fabric's
    live-holder sync) sees one container holding all four, whose partition then stays held."""
    import grpc

    from services.device_plugin.api import pr_grpc

    a = fake_kubelet.admit("tenant-acme", "train-0", "nvidia.com/gpu", 4)
    with grpc.insecure_channel(f"unix://{fake_kubelet.pod_resources_socket}") as ch:
        raw = pr_grpc.PodResourcesListerStub(ch).List(pr_pb2.ListPodResourcesRequest(), timeout=5)
    assert [list(d.device_ids) for d in raw.pod_resources[0].containers[0].devices] == [[b] for b in a.device_ids]
    reader = PodResourcesReader(fake_kubelet.pod_resources_socket)
    try:
        [held] = reader.list("nvidia.com/gpu")
    finally:
        reader.close()
    assert (held.namespace, held.pod, held.device_ids) == ("tenant-acme", "train-0", tuple(sorted(a.device_ids)))
