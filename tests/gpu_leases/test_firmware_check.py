"""The firmware check on the fake HGX board: good ROM, tampered ROM, rebinding, vanishing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.fake_sysfs import (
    GOLDEN_ROM_VERSION,
    H100_SXM5_DEVICE,
    FakeBoard,
    golden_rom_sha256,
    rom_image,
)
from services.gpu_leases.firmware import GoldenTable, SysfsFirmwareCheck, rom_version

GPU = "0000:18:00.0"


@pytest.fixture
def golden() -> GoldenTable:
    return GoldenTable.from_json(
        json.dumps({H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}})
    )


@pytest.fixture
def checker(hgx_board: FakeBoard, golden: GoldenTable) -> SysfsFirmwareCheck:
    # Plain files cannot play sysfs's rom enable/disable protocol; see SysfsFirmwareCheck.
    return SysfsFirmwareCheck(hgx_board.sysfs, golden, toggle_rom=False)


def test_golden_rom_passes(checker: SysfsFirmwareCheck) -> None:
    result = checker.check(GPU)
    assert result.passed, result.message
    assert result.rom_version == GOLDEN_ROM_VERSION and result.rom_sha256 == golden_rom_sha256()


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.write_rom(GPU, rom_image(tampered=True)), "RomMismatch"),
        (lambda b: b.write_rom(GPU, rom_image(version="96.00.99.00.01")), "RomVersionMismatch"),
        (lambda b: b.write_rom(GPU, b"\x00" * 512), "RomInvalid"),
        (lambda b: b.bind(GPU, "nvidia"), "NotBoundToVfio"),
        (lambda b: b.bind(GPU, None), "NotBoundToVfio"),
        (lambda b: b.remove_device(GPU), "DeviceVanished"),
        (lambda b: (b.device_dir(GPU) / "vendor").write_text("0x8086\n"), "IdentityChanged"),
        (lambda b: (b.device_dir(GPU) / "rom").unlink(), "NoRom"),
    ],
    ids=["tampered", "other-version", "no-signature", "host-driver", "unbound", "vanished", "identity", "no-rom"],
)
def test_bad_states_fail_with_their_reason(hgx_board: FakeBoard, checker: SysfsFirmwareCheck, mutate, reason) -> None:
    mutate(hgx_board)
    result = checker.check(GPU)
    assert not result.passed
    assert result.reason == reason
    assert GPU in result.message


def test_unknown_device_id_is_not_trusted(hgx_board: FakeBoard) -> None:
    result = SysfsFirmwareCheck(hgx_board.sysfs, GoldenTable(), toggle_rom=False).check(GPU)
    assert (result.passed, result.reason) == (False, "NoGoldenFirmware")


def test_rom_enable_protocol_is_followed(tmp_path: Path, golden: GoldenTable) -> None:
    """With toggle_rom the check enables the ROM, reads it, and leaves it disabled ("0")."""
    scratch = tmp_path / "sys" / "bus" / "pci" / "devices" / GPU
    scratch.mkdir(parents=True)
    (scratch / "rom").write_bytes(b"")
    data = SysfsFirmwareCheck(tmp_path / "sys", golden, toggle_rom=True).read_rom(GPU)
    assert data == b"1"  # a plain file shows what was written first: the enable word
    assert (scratch / "rom").read_text() == "0"  # the last word written disables the ROM


@pytest.mark.parametrize(
    "text",
    ["[]", '{"2330": {"sha256": ["x"]}}', '{"0x2330": {}}'],
    ids=["not-object", "bad-key", "no-sha"],
)
def test_golden_table_rejects_bad_config(text: str) -> None:
    with pytest.raises(ValueError, match="golden firmware"):
        GoldenTable.from_json(text)


def test_rom_version_parsing() -> None:
    assert rom_version(rom_image()) == GOLDEN_ROM_VERSION
    assert rom_version(b"nothing here") is None


def test_garbage_identity_is_an_identity_change(hgx_board: FakeBoard, checker: SysfsFirmwareCheck) -> None:
    (hgx_board.device_dir(GPU) / "vendor").write_text("not-hex\n")
    result = checker.check(GPU)
    assert (result.passed, result.reason) == (False, "IdentityChanged")


def test_the_version_string_of_a_real_vbios_is_read() -> None:
    """An H200's VBIOS as nvidia-smi reports it (96.00.A5.00.1A): hexadecimal groups."""
    assert rom_version(b"\x55\xaa...NVIDIA Version 96.00.A5.00.1A \x00") == "96.00.A5.00.1A"
