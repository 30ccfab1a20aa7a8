"""GPU identity from the host: platform layouts (physical id = module id -> PCI address).

On H100 Fabric Manager's partition info has empty PCI bus ids and UUIDs, so the
service maps physical ids itself; these tests cover the layouts, loading one from a
file (a mounted ConfigMap), the sysfs cross-check, the check against FM's table, and
the mapping served on /v1/topology with the binding over the C double in H100 mode.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from core.platforms import (
    DGX_H100,
    PLATFORMS,
    SUPERMICRO_HGX_H100,
    LayoutError,
    cross_check_sysfs,
    load_layout,
    validate_against_table,
)
from core.topology import HGX_H100_PARTITIONS
from devtools.fake_sysfs import FakeBoard
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.nvfm import NvfmFabricManager
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from tests.fabric.factories import holder, pcis

TABLE = [p.gpus for p in HGX_H100_PARTITIONS]


def test_shipped_layouts_cover_the_partition_table() -> None:
    assert set(PLATFORMS) == {"dgx-h100", "supermicro-hgx-h100"}
    for layout in PLATFORMS.values():
        assert validate_against_table(layout, TABLE) == []
        assert sorted(layout.physical_id_to_bdf()) == list(range(1, 9))
    assert DGX_H100.physical_id_to_bdf()[1] == "0000:3a:00.0"  # module ids do not follow bus order
    assert not SUPERMICRO_HGX_H100.verified  # the runbook's mapping step confirms it


def test_the_fake_board_is_the_dgx_layout(hgx_board: FakeBoard) -> None:
    assert cross_check_sysfs(DGX_H100, hgx_board.sysfs) == []
    problems = cross_check_sysfs(SUPERMICRO_HGX_H100, hgx_board.sysfs)
    assert "GPU 1: 0000:19:00.0 not in sysfs" in problems
    assert any("NVIDIA GPU 0000:18:00.0 in sysfs is not in layout supermicro-hgx-h100" in p for p in problems)


def test_sysfs_cross_check_finds_a_wrong_numa_node_and_a_non_gpu(hgx_board: FakeBoard) -> None:
    (hgx_board.device_dir("0000:9a:00.0") / "numa_node").write_text("0\n")
    (hgx_board.device_dir("0000:18:00.0") / "class").write_text("0x068000\n")
    problems = cross_check_sysfs(DGX_H100, hgx_board.sysfs)
    assert "GPU 7: 0000:9a:00.0 is on NUMA node 0, the layout says 1" in problems
    assert any(p.startswith("GPU 2: 0000:18:00.0 is not an NVIDIA 3D controller") for p in problems)


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_layout_from_a_file_as_a_configmap_mounts_it(tmp_path: Path, fmt: str) -> None:
    gpus = [{"physical_id": i, "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0"} for i in range(1, 9)]
    data = {"name": "my-hgx", "gpus": gpus, "nvswitches": ["0000:05:00.0"], "verified": True}
    path = tmp_path / f"layout.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(data))
    else:
        import yaml

        path.write_text(yaml.safe_dump(data))
    layout = load_layout(path)
    assert layout.name == "my-hgx" and layout.verified and layout.source == str(path)
    assert layout.physical_id_to_bdf()[3] == "0000:13:00.0"  # NVML's 8-digit upper-case form normalised
    assert validate_against_table(layout, TABLE) == []


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ('{"gpus": []}', "'gpus' must list each GPU"),
        ('{"gpus": [{"physical_id": "x", "pci_bus_id": "0000:18:00.0"}]}', "gpus\\[0\\] needs an integer physical_id"),
        ('{"gpus": [{"physical_id": 1, "pci_bus_id": "18"}]}', "gpus\\[0\\] needs"),
        (
            '{"gpus": [{"physical_id": 1, "pci_bus_id": "0000:18:00.0"}, '
            '{"physical_id": 1, "pci_bus_id": "0000:19:00.0"}]}',
            "a physical id appears twice",
        ),
        ("[: nope", "neither JSON nor YAML"),
    ],
    ids=["empty", "bad-id", "bad-bdf", "duplicate-id", "garbage"],
)
def test_bad_layout_files_are_refused_naming_the_field(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "layout.json"
    path.write_text(content)
    with pytest.raises(LayoutError, match=error):
        load_layout(path)


def test_unknown_layout_name_lists_the_shipped_ones() -> None:
    with pytest.raises(LayoutError, match="neither a shipped layout"):
        load_layout("hgx-b200")


def test_layout_that_misses_a_gpu_fm_uses_is_reported() -> None:
    from dataclasses import replace

    seven = replace(
        DGX_H100, gpu_bdfs=DGX_H100.gpu_bdfs[:7], gpu_physical_ids=DGX_H100.gpu_physical_ids[:7], gpu_numa_nodes=None
    )
    problems = validate_against_table(seven, TABLE)
    assert any("use physical id(s) [6]" in p for p in problems)
    assert "layout dgx-h100 has 7 GPUs, expected 8" in problems


def test_h100_listing_with_empty_pci_bus_ids_uses_the_layout(tmp_path: Path) -> None:
    """The simulator in H100 mode gives no PCI bus ids; the service fills them from the layout
    and activation by PCI address works (GPUs are matched by physical id)."""
    fm = SimulatedFabricManager(SimulatedFabric(h100=True))
    with ActivationStore(tmp_path / "st") as store:
        service = PartitionService(fm, store, layout=DGX_H100)
        assert service.validate_layout() == []
        parts = service.list_partitions()
        assert {g["pci_bus_id"] for p in parts for g in p["gpus"]} == set(DGX_H100.gpu_bdfs)
        assert service.activate(holder(1, 3), pcis(1, 3))["partition_ids"] == [3]
        topo = service.topology()
        assert topo["layout"]["name"] == "dgx-h100"
        assert {g["physical_id"]: g["pci_bus_id"] for g in topo["gpus"]} == DGX_H100.physical_id_to_bdf()
        assert {g["pci_source"] for g in topo["gpus"]} == {"layout"}


def test_h100_degradation_shows_in_topology(tmp_path: Path) -> None:
    fabric = SimulatedFabric(h100=True)
    fabric.inject_gpu_nvlink_failure(4, ports=(1, 2))
    with ActivationStore(tmp_path / "st") as store:
        topo = PartitionService(SimulatedFabricManager(fabric), store, layout=DGX_H100).topology()
    g4 = next(g for g in topo["gpus"] if g["physical_id"] == 4)
    assert g4["healthy"] is False and g4["reason"] == "NVLink degraded: 16 of 18 NVLinks available"
    assert all(g["healthy"] for g in topo["gpus"] if g["physical_id"] != 4)


def test_binding_over_the_h100_double_lists_without_raising(
    fake_lib: ctypes.CDLL, libnvfm_path: Path, tmp_path: Path
) -> None:
    """The C double in H100 mode writes empty pciBusId/uuid: listing must not raise, and the
    host layout supplies the addresses (no gpu_map given to the binding)."""
    fake_lib.fakeFmSetH100(1)
    client = NvfmFabricManager(library=libnvfm_path, address="10.0.0.2:6666")
    client.connect()
    try:
        raw = client.list_partitions()
        assert {g.pci_bus_id for p in raw for g in p.gpus} == {""}
        with ActivationStore(tmp_path / "st") as store:
            service = PartitionService(client, store, layout=DGX_H100)
            assert service.activate(holder(5, 6, 7, 8), pcis(5, 6, 7, 8))["partition_ids"] == [2]
            assert fake_lib.fakeFmIsActive(2) == 1
            assert service.validate_layout() == []
    finally:
        client.close()


def test_layout_disagreeing_with_fm_pci_ids_is_reported(tmp_path: Path, hgx_board: FakeBoard) -> None:
    """Where FM does give PCI bus ids (pre-H100 behaviour), they are checked against the layout."""
    fm = SimulatedFabricManager(SimulatedFabric(h100=False))
    with ActivationStore(tmp_path / "st") as store:
        service = PartitionService(fm, store, layout=SUPERMICRO_HGX_H100)
        problems = service.validate_layout()
    assert "GPU 1: Fabric Manager says 0000:3a:00.0, layout supermicro-hgx-h100 says 0000:19:00.0" in problems


def test_sysfs_facts_beside_the_layout(hgx_board: FakeBoard) -> None:
    """NUMA node, physical slot (slots/*/address) and upstream bridge, where sysfs has them."""
    import os

    from core.platforms import sysfs_gpu_facts

    slot = hgx_board.sysfs / "bus" / "pci" / "slots" / "GPU-SXM-3"
    slot.mkdir(parents=True)
    (slot / "address").write_text("0000:3a:00\n")
    # A device directory that lives under its bridge, as on real sysfs (bus/pci/devices/* are links).
    bridge = hgx_board.sysfs / "devices" / "pci0000:00" / "0000:39:01.0"
    bridge.mkdir(parents=True)
    real = bridge / "0000:3a:00.0"
    os.rename(hgx_board.device_dir("0000:3a:00.0"), real)
    hgx_board.device_dir("0000:3a:00.0").symlink_to(real)
    facts = sysfs_gpu_facts(hgx_board.sysfs, "0000:3a:00.0")
    assert facts == {"present": True, "numa_node": 0, "slot": "GPU-SXM-3", "upstream_bridge": "0000:39:01.0"}
    view = DGX_H100.view(hgx_board.sysfs)
    row = next(g for g in view["gpus"] if g["physical_id"] == 1)
    assert row["sysfs"]["slot"] == "GPU-SXM-3"
    assert sysfs_gpu_facts(hgx_board.sysfs, "0000:99:00.0")["present"] is False
