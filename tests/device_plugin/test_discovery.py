"""Discovery of vfio-bound GPUs from sysfs on the fake HGX H100 board and its variants."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from core import vfio_sysfs as sysfs
from devtools.fake_sysfs import GPU_BDFS, MEMORY_CONTROLLER_BDF, NVSWITCH_BDFS, build_hgx_h100
from tests.fixtures.fake_kubelet import FakeKubelet


def test_dgx_board_advertises_the_eight_gpus_only(hgx_board) -> None:
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert [g.bdf for g in inv.gpus] == list(GPU_BDFS)
    assert inv.left_out == () and inv.problems == ()
    found = {g.bdf for g in inv.gpus}
    assert not found & set(NVSWITCH_BDFS) and MEMORY_CONTROLLER_BDF not in found
    for g, fake in zip(inv.gpus, hgx_board.gpus, strict=True):
        assert g.model == "NVIDIA H100 80GB HBM3 SXM5"
        assert g.device_id == 0x2330
        assert g.driver == "vfio-pci"
        assert g.iommu_group == fake.iommu_group
        assert g.numa_node == fake.numa_node
        assert g.device_nodes() == (f"/dev/vfio/{fake.iommu_group}",)
        assert not g.iommufd


def test_supermicro_shared_switch_group_does_not_hide_gpus(supermicro_board) -> None:
    inv = sysfs.scan(supermicro_board.sysfs, supermicro_board.dev)
    assert [g.bdf for g in inv.gpus] == list(GPU_BDFS)
    assert len({d.iommu_group for d in supermicro_board.nvswitches}) == 1


def test_iommufd_board_uses_vfio_cdev_and_iommu(tmp_path: Path) -> None:
    board = build_hgx_h100(tmp_path / "node", iommufd=True)
    inv = sysfs.scan(board.sysfs, board.dev)
    assert len(inv.gpus) == 8
    for g, fake in zip(inv.gpus, board.gpus, strict=True):
        assert g.iommufd and g.vfio_device == f"vfio{fake.vfio_dev}"
        assert g.device_nodes() == (f"/dev/vfio/devices/vfio{fake.vfio_dev}", "/dev/iommu")


def test_gpu_on_nvidia_driver_is_reported_not_advertised(tmp_path: Path) -> None:
    board = build_hgx_h100(tmp_path / "node", gpu_drivers={"0000:2a:00.0": "nvidia", "0000:db:00.0": None})
    inv = sysfs.scan(board.sysfs, board.dev)
    assert [g.bdf for g in inv.gpus] == [b for b in GPU_BDFS if b not in ("0000:2a:00.0", "0000:db:00.0")]
    reasons = {lo.bdf: lo.reason for lo in inv.left_out}
    assert reasons == {"0000:2a:00.0": "bound to nvidia, not a vfio driver", "0000:db:00.0": "not bound to any driver"}
    # PCI-order ids still count every GPU on the board.
    assert inv.all_gpu_bdfs == GPU_BDFS


def test_non_vfio_gpu_logged_and_exported(
    tmp_path: Path, fake_kubelet: FakeKubelet, make_settings, run_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    board = build_hgx_h100(tmp_path / "node", gpu_drivers={"0000:2a:00.0": "nvidia"})
    with caplog.at_level(logging.WARNING):
        p = run_plugin(make_settings(board, fabric_socket=""))
        conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    assert "0000:2a:00.0" not in conn.health()
    assert len(conn.health()) == 7
    assert any("gpu=0000:2a:00.0 not advertised: bound to nvidia" in r.getMessage() for r in caplog.records)
    text = p.metrics.render().decode()
    assert 'gpucaas_device_plugin_gpus_not_advertised{node="gpu-node-1"} 1.0' in text
    assert 'gpu="0000:2a:00.0"' in text and 'driver="nvidia"' in text


def test_gpu_sharing_its_iommu_group_is_not_advertised(hgx_board) -> None:
    # Put an NVSwitch into the first GPU's group: passing the group would hand the switch over.
    gpu, switch = hgx_board.gpus[0], hgx_board.nvswitches[0]
    link = hgx_board.sysfs / "kernel" / "iommu_groups" / str(gpu.iommu_group) / "devices" / switch.bdf
    link.symlink_to(os.path.relpath(hgx_board.device_dir(switch.bdf), link.parent))
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert gpu.bdf not in {g.bdf for g in inv.gpus}
    (lo,) = inv.left_out
    assert lo.bdf == gpu.bdf and switch.bdf in lo.reason and "IOMMU group" in lo.reason


def test_unknown_device_id_gets_a_generic_model_name(hgx_board) -> None:
    (hgx_board.device_dir(GPU_BDFS[0]) / "device").write_text("0x1234\n")
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert inv.by_bdf()[GPU_BDFS[0]].model == "NVIDIA GPU (device 0x1234)"


def test_numa_minus_one_means_unknown(hgx_board) -> None:
    (hgx_board.device_dir(GPU_BDFS[0]) / "numa_node").write_text("-1\n")
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert inv.by_bdf()[GPU_BDFS[0]].numa_node is None
    assert inv.problems == ()
