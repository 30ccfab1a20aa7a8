"""NVSwitch and memory-controller discovery from sysfs, DGX and Supermicro IOMMU layouts."""

from __future__ import annotations

import pytest

from devtools.fake_sysfs import MEMORY_CONTROLLER_BDF, NVSWITCH_BDFS, FakeBoard, build_hgx_h100
from services.fabric.discovery import discover_fabric_devices, normalize_bdf
from services.fabric.errors import DiscoveryError


@pytest.mark.parametrize(
    ("variant", "groups", "shared"),
    [("dgx", 5, False), ("supermicro", 1, True)],
    ids=["dgx-separate-groups", "supermicro-shared-group"],
)
def test_finds_switches_and_memory_controller(tmp_path, variant: str, groups: int, shared: bool) -> None:
    board = build_hgx_h100(tmp_path / "n", variant=variant)
    found = discover_fabric_devices(board.sysfs)
    assert [d.bdf for d in found.nvswitches] == list(NVSWITCH_BDFS)
    assert found.memory_controller is not None and found.memory_controller.bdf == MEMORY_CONTROLLER_BDF
    assert len(found.iommu_groups) == groups
    assert found.shared_iommu_group is shared
    assert [d.bdf for d in found.passthrough] == [*NVSWITCH_BDFS, MEMORY_CONTROLLER_BDF]


def test_configured_addresses_win(hgx_board: FakeBoard) -> None:
    found = discover_fabric_devices(
        hgx_board.sysfs, nvswitches=["05:00.0", "0000:06:00.0"], memory_controller="03:00.1"
    )
    assert [d.bdf for d in found.nvswitches] == ["0000:05:00.0", "0000:06:00.0"]
    assert found.memory_controller.bdf == MEMORY_CONTROLLER_BDF


def test_group_member_on_another_driver_is_named(supermicro_board: FakeBoard) -> None:
    # Pass only one switch: the shared group's others are on vfio-pci, so fine ...
    discover_fabric_devices(supermicro_board.sysfs, nvswitches=[NVSWITCH_BDFS[0]])
    # ... but a group member taken by a host driver makes the group unusable.
    supermicro_board.bind(NVSWITCH_BDFS[1], "nvidia-nvswitch")
    with pytest.raises(DiscoveryError, match=f"{NVSWITCH_BDFS[1]}.*nvidia-nvswitch"):
        discover_fabric_devices(supermicro_board.sysfs, nvswitches=[NVSWITCH_BDFS[0]])


def test_require_vfio(hgx_board: FakeBoard) -> None:
    hgx_board.bind(NVSWITCH_BDFS[2], None)
    with pytest.raises(DiscoveryError, match="no driver"):
        discover_fabric_devices(hgx_board.sysfs, require_vfio=True)


def test_no_switch_is_a_clear_error(tmp_path) -> None:
    (tmp_path / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    with pytest.raises(DiscoveryError, match="no NVSwitch found.*GPUCAAS_FABRIC_NVSWITCHES"):
        discover_fabric_devices(tmp_path / "sys")


def test_missing_configured_device(hgx_board: FakeBoard) -> None:
    with pytest.raises(DiscoveryError, match="0000:77:00.0 not found"):
        discover_fabric_devices(hgx_board.sysfs, nvswitches=["0000:77:00.0"])


@pytest.mark.parametrize(("raw", "want"), [("05:00.0", "0000:05:00.0"), ("0000:DB:00.1", "0000:db:00.1")])
def test_normalize_bdf(raw: str, want: str) -> None:
    assert normalize_bdf(raw) == want


def test_normalize_bdf_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="nvswitches: '5:0.0' is not a PCI address"):
        normalize_bdf("5:0.0", field="nvswitches")
