"""Missing files and garbage values in sysfs: a clear log line, the GPU left out, no crash."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from core import vfio_sysfs as sysfs
from devtools.fake_sysfs import GPU_BDFS, FakeBoard
from devtools.waiting import wait_for
from tests.fixtures.fake_kubelet import FakeKubelet

BDF = GPU_BDFS[2]


def _dev(board: FakeBoard) -> Path:
    return board.device_dir(BDF)


CASES: list[tuple[str, Callable[[FakeBoard], None], str]] = [
    ("vendor-missing", lambda b: (_dev(b) / "vendor").unlink(), "vendor is missing"),
    ("vendor-garbage", lambda b: (_dev(b) / "vendor").write_text("nvidia!\n"), "expected a hex PCI vendor id"),
    ("class-garbage", lambda b: (_dev(b) / "class").write_bytes(b"\xff\xfe\x00"), "class"),
    ("device-missing", lambda b: (_dev(b) / "device").unlink(), "device is missing"),
    ("device-empty", lambda b: (_dev(b) / "device").write_text(""), "expected a hex PCI device id"),
    ("iommu-group-missing", lambda b: (_dev(b) / "iommu_group").unlink(), "iommu_group is missing"),
    (
        "iommu-group-garbage",
        lambda b: (_dev(b) / "iommu_group").unlink() or (_dev(b) / "iommu_group").symlink_to("/nonexistent/groupX"),
        "not a group link",
    ),
    (
        "vendor-is-a-directory",
        lambda b: ((_dev(b) / "vendor").unlink(), (_dev(b) / "vendor").mkdir()),
        "vendor unreadable",
    ),
]


@pytest.mark.parametrize(("corrupt", "expected"), [(c, e) for _, c, e in CASES], ids=[i for i, _, _ in CASES])
def test_corrupt_gpu_entry_is_left_out_with_reason(hgx_board: FakeBoard, corrupt, expected: str) -> None:
    corrupt(hgx_board)
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert BDF not in {g.bdf for g in inv.gpus}
    assert len(inv.gpus) == 7
    assert any(BDF in p and expected in p for p in inv.problems) or any(
        lo.bdf == BDF and expected in lo.reason for lo in inv.left_out
    ), (inv.problems, inv.left_out)


def test_garbage_numa_keeps_gpu_with_unknown_node(hgx_board: FakeBoard) -> None:
    (_dev(hgx_board) / "numa_node").write_text("zero\n")
    inv = sysfs.scan(hgx_board.sysfs, hgx_board.dev)
    assert inv.by_bdf()[BDF].numa_node is None
    assert any("numa_node holds 'zero'" in p for p in inv.problems)


def test_missing_pci_tree_discovers_nothing(tmp_path: Path) -> None:
    inv = sysfs.scan(tmp_path / "nosys", tmp_path / "nodev")
    assert inv.gpus == ()
    assert "cannot list" in inv.problems[0]


def test_running_plugin_logs_and_survives_corruption(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    (_dev(hgx_board) / "vendor").write_text("garbage\n")
    (hgx_board.device_dir(GPU_BDFS[5]) / "numa_node").write_text("\x00\x01")
    with caplog.at_level(logging.WARNING):
        run_plugin(make_settings(hgx_board, fabric_socket=""))
        conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu")
        assert BDF not in conn.health() and len(conn.health()) == 7
        # The whole PCI tree vanishes while running: every GPU Unhealthy, nothing crashes.
        shutil.rmtree(hgx_board.sysfs / "bus" / "pci" / "devices")
        assert conn.wait_for(lambda c: set(c.health().values()) == {"Unhealthy"})
        assert not conn.stream_ended
        wait_for(
            lambda: any("cannot list" in r.getMessage() for r in caplog.records),
            10,
            interval=0.05,
            what="the 'cannot list' warning",
        )
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{BDF}" in m and "expected a hex PCI vendor id" in m for m in messages)
    assert any("cannot list" in m for m in messages)
    assert os.path.exists(fake_kubelet.plugin_dir / "gpucaas-nvidia.com_gpu.sock")
