"""Health in ListAndWatch: sysfs entry, /dev/vfio node, vfio binding, fabric failures, extra sources."""

from __future__ import annotations

from pathlib import Path

from devtools.fake_sysfs import GPU_BDFS, FakeBoard, build_hgx_h100
from services.device_plugin.main import DevicePlugin
from tests.device_plugin.conftest import RunningFabric
from tests.fixtures.fake_kubelet import FakeKubelet, PluginConnection

GPU = GPU_BDFS[4]


def _health(conn: PluginConnection, bdf: str, want: str) -> bool:
    return conn.wait_for(lambda c: c.health().get(bdf) == want, timeout=10)


def test_vfio_node_disappearing_and_returning(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    hgx_board.remove_vfio_node(GPU)
    assert _health(conn, GPU, "Unhealthy")
    assert [b for b, h in conn.health().items() if h == "Unhealthy"] == [GPU]
    hgx_board.restore_vfio_node(GPU)
    assert _health(conn, GPU, "Healthy")


def test_sysfs_entry_disappearing(plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    hgx_board.remove_device(GPU)
    assert _health(conn, GPU, "Unhealthy")
    states = {d.bdf: d for d in plugin.core.snapshot()[0]}
    assert states[GPU].reason == "PCI device gone from sysfs"
    text = plugin.metrics.render().decode()
    assert (
        f'gpucaas_device_plugin_gpu_healthy{{gpu="{GPU}",model="NVIDIA H100 80GB HBM3 SXM5",node="gpu-node-1"}} 0.0'
        in text
    )


def test_unbinding_from_vfio_and_rebinding(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    hgx_board.bind(GPU, "nvidia")
    assert _health(conn, GPU, "Unhealthy")
    assert {d.bdf: d.reason for d in plugin.core.snapshot()[0]}[GPU] == "bound to nvidia, not a vfio driver"
    hgx_board.bind(GPU, "vfio-pci")
    assert _health(conn, GPU, "Healthy")


def test_fabric_reported_failure_and_recovery(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, fabric: RunningFabric, hgx_board: FakeBoard
) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    physical_id = next(g.physical_id for g in hgx_board.gpus if g.bdf == GPU)
    fabric.fm.inject_gpu_nvlink_failure(physical_id, ports=(4, 5))
    assert _health(conn, GPU, "Unhealthy")
    assert {d.bdf: d.reason for d in plugin.core.snapshot()[0]}[GPU] == "NVLink failure on ports [4, 5]"
    fabric.fm.clear_gpu_nvlink_failure(physical_id)
    assert _health(conn, GPU, "Healthy")


def test_extra_health_source_hook(plugin: DevicePlugin, fake_kubelet: FakeKubelet) -> None:
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    leases = {GPU: "GPULease is Quarantined"}
    plugin.core.add_health_source(lambda: dict(leases))
    assert _health(conn, GPU, "Unhealthy")
    leases.clear()
    assert _health(conn, GPU, "Healthy")


def test_broken_health_source_is_ignored(plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard) -> None:
    def broken() -> dict[str, str]:
        raise RuntimeError("lease cache not ready")

    plugin.core.add_health_source(broken)
    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    hgx_board.remove_vfio_node(GPU)
    assert _health(conn, GPU, "Unhealthy")  # the device watcher keeps going


def test_gpu_appearing_on_vfio_is_advertised(
    tmp_path: Path, fake_kubelet: FakeKubelet, make_settings, run_plugin
) -> None:
    board = build_hgx_h100(tmp_path / "node", gpu_drivers={GPU: "nvidia"})
    run_plugin(make_settings(board, fabric_socket=""))
    conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    assert GPU not in conn.health()
    board.bind(GPU, "vfio-pci")
    board.restore_vfio_node(GPU)
    assert _health(conn, GPU, "Healthy")


def test_unhealthy_gpu_refused_at_allocate(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    import pytest

    from tests.fixtures.fake_kubelet import AdmissionError

    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    hgx_board.remove_vfio_node(GPU)
    assert _health(conn, GPU, "Unhealthy")
    with pytest.raises(
        AdmissionError, match=r"FAILED_PRECONDITION.*0000:9a:00.0 \(device node /dev/vfio/\d+ is missing\)"
    ):
        fake_kubelet.admit("tenant-a", "p", "nvidia.com/gpu", 1, devices=[GPU])


def test_a_gpu_being_released_is_allocated_and_waits_at_pre_start(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    """The kubelet may choose a GPU before it hears that its lease is being released: Allocate
    must not fail the pod for that (UnexpectedAdmissionError is final); PreStartContainer,
    which the kubelet retries, holds the start until the release is over."""
    import pytest

    from services.device_plugin.errors import DeviceUnhealthy

    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    releasing = {GPU: "GPU lease gpu-node-1-0000-9a-00-0 is Releasing: PodGone"}
    plugin.core.add_health_source(lambda: dict(releasing))
    plugin.core.add_transient_source(lambda: dict(releasing))
    plugin.core.refresh_devices()
    assert _health(conn, GPU, "Unhealthy")  # the kubelet is told not to choose it

    plugin.core.allocate([GPU])  # chosen anyway (the kubelet had not heard): admitted
    with pytest.raises(DeviceUnhealthy, match="is Releasing"):
        plugin.core.pre_start([GPU])
    releasing.clear()  # the check passed: the lease is Free again
    plugin.core.refresh_devices()
    plugin.core.pre_start([GPU])

    hgx_board.remove_vfio_node(GPU)  # a fault of its own besides: refused at once
    releasing[GPU] = "GPU lease gpu-node-1-0000-9a-00-0 is Checking: CheckRequested"
    plugin.core.refresh_devices()
    with pytest.raises(DeviceUnhealthy, match="is missing"):
        plugin.core.allocate([GPU])


def test_pre_start_tells_the_kubelet_a_wait_from_a_refusal_for_good(
    plugin: DevicePlugin, fake_kubelet: FakeKubelet, hgx_board: FakeBoard
) -> None:
    """Over gRPC, as the kubelet reads it: a GPU being released answers Unavailable (the start is
    retried and succeeds later); a GPU that went bad after admission answers FailedPrecondition,
    which the API reads to make the pod again on other GPUs (``pods.refused_before_start``)."""
    import grpc
    import pytest

    from services.device_plugin.api import dp_pb2

    conn = fake_kubelet.plugins["nvidia.com/gpu"]
    checking = {GPU: "GPU lease gpu-node-1-0000-9a-00-0 is Checking: CheckRequested"}
    leases = dict(checking)  # every lease not Free, as the lease agent gives them
    plugin.core.add_health_source(lambda: dict(leases))
    plugin.core.add_transient_source(lambda: dict(checking))  # those whose release is under way
    plugin.core.refresh_devices()
    plugin.core.allocate([GPU])

    def pre_start() -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as refused:
            conn.stub.PreStartContainer(dp_pb2.PreStartContainerRequest(devices_ids=[GPU]), timeout=10)
        return refused.value.code()  # type: ignore[attr-defined]

    assert pre_start() == grpc.StatusCode.UNAVAILABLE
    checking.clear()  # the check failed: the GPU is quarantined
    leases[GPU] = "GPU lease gpu-node-1-0000-9a-00-0 is Quarantined: RomMismatch"
    plugin.core.refresh_devices()
    assert pre_start() == grpc.StatusCode.FAILED_PRECONDITION
