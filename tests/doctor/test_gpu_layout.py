"""``gpucaas doctor`` shows the GPU layout (module id -> PCI) the fabric service uses and warns
when it does not match Fabric Manager or sysfs (on H100, FM gives no PCI bus ids)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.platforms import DGX_H100, SUPERMICRO_HGX_H100, PlatformLayout
from devtools.fake_sysfs import FakeBoard
from services.fabric.fabric_manager.simulator import SimulatedFabric
from tests.doctor.conftest import FakeNode, _node
from tests.doctor.test_node_readiness import by_id, run_doctor


def _h100_node(board: FakeBoard, short_dir: Path, layout: PlatformLayout) -> Iterator[FakeNode]:
    yield from _node(board, short_dir, fabric=SimulatedFabric(h100=True), layout=layout)


@pytest.fixture
def h100_node(hgx_board: FakeBoard, short_dir: Path) -> Iterator[FakeNode]:
    yield from _h100_node(hgx_board, short_dir, DGX_H100)


@pytest.fixture
def wrong_layout_node(hgx_board: FakeBoard, short_dir: Path) -> Iterator[FakeNode]:
    # A layout whose module ids 7 and 8 are missing: FM's table uses them.
    seven = PlatformLayout(
        name="partial",
        gpu_bdfs=SUPERMICRO_HGX_H100.gpu_bdfs[:6],
        gpu_physical_ids=SUPERMICRO_HGX_H100.gpu_physical_ids[:6],
        nvswitch_bdfs=SUPERMICRO_HGX_H100.nvswitch_bdfs,
    )
    yield from _h100_node(hgx_board, short_dir, seven)


def test_doctor_lists_the_mapping_from_the_layout(h100_node: FakeNode) -> None:
    code, report = run_doctor(h100_node)
    fabric = by_id(report)["fabric-service"]
    assert fabric["status"] == "ok", fabric
    details = fabric["details"]
    assert "GPU layout: dgx-h100 (shipped, unverified on hardware)" in details
    assert "GPU 1 (module id) -> 0000:3a:00.0 [layout]" in details
    assert sum(d.startswith("GPU ") and "(module id)" in d for d in details) == 8


def test_doctor_warns_on_a_layout_that_misses_gpus(wrong_layout_node: FakeNode) -> None:
    code, report = run_doctor(wrong_layout_node)
    fabric = by_id(report)["fabric-service"]
    assert fabric["status"] == "warn", fabric
    assert "GPUs [7, 8] have no PCI address" in fabric["summary"]
    assert "GPUCAAS_FABRIC_PLATFORM" in fabric["hint"]
    assert any("use physical id(s) [7, 8]" in d for d in fabric["details"])
