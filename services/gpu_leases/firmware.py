"""The check a GPU passes between two tenants, on a node without an NVIDIA host driver.

A tenant runs NVIDIA's kernel driver inside its VM and could try to flash
firmware. Before the next tenant gets the GPU, ``SysfsFirmwareCheck`` reads the
GPU's PCI expansion ROM through sysfs (``rom``: write "1" to enable, read,
write "0" to disable), hashes it and reads the version string it carries, and
compares both with the golden values configured for the PCI device id. It also
checks the device is still bound to a vfio driver and that its identity
(vendor, device, class) is still what it was.

``FirmwareCheck`` is the interface: a stronger check (a trusted check VM that
loads the driver and attests the firmware) can replace this one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.pci import NVIDIA_VENDOR
from services.gpu_leases.errors import BadGoldenTable

log = logging.getLogger(__name__)

ROM_SIGNATURE = b"\x55\xaa"
_VERSION_RE = re.compile(rb"Version\s+([0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){3,4})")


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    reason: str  # CamelCase, for conditions: CheckPassed, RomMismatch, DeviceVanished, ...
    message: str
    rom_sha256: str | None = None
    rom_version: str | None = None


@dataclass(frozen=True)
class GoldenFirmware:
    """Accepted firmware for one PCI device id."""

    sha256: frozenset[str]
    versions: frozenset[str] = frozenset()


@dataclass
class GoldenTable:
    by_device_id: dict[str, GoldenFirmware] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> GoldenTable:
        """``{"0x2330": {"sha256": ["..."], "versions": ["96.00.74.00.01"]}}``"""
        raw = json.loads(text) if text.strip() else {}
        if not isinstance(raw, dict):
            raise BadGoldenTable('golden firmware table must be a JSON object keyed by PCI device id (e.g. "0x2330")')
        table: dict[str, GoldenFirmware] = {}
        for device_id, entry in raw.items():
            if not re.fullmatch(r"0x[0-9a-f]{4}", device_id):
                raise BadGoldenTable(f"golden firmware key {device_id!r} is not a PCI device id like 0x2330")
            if not isinstance(entry, dict) or not entry.get("sha256"):
                raise BadGoldenTable(f"golden firmware for {device_id} needs a non-empty 'sha256' list")
            table[device_id] = GoldenFirmware(
                frozenset(s.lower() for s in entry["sha256"]), frozenset(entry.get("versions", []))
            )
        return cls(table)

    @classmethod
    def load(cls, path: Path) -> GoldenTable:
        return cls.from_json(path.read_text())


class FirmwareCheck(Protocol):
    def check(self, pci_address: str) -> CheckResult: ...


def _hex(text: str) -> int | None:
    """A sysfs hex attribute ("0x10de") as a number; None for anything else."""
    try:
        return int(text, 16)
    except ValueError:
        return None


def rom_version(image: bytes) -> str | None:
    match = _VERSION_RE.search(image)
    return match.group(1).decode() if match else None


class SysfsFirmwareCheck:
    """Reads ROM and identity from ``<sysfs_root>/bus/pci/devices/<BDF>``.

    ``toggle_rom`` writes the enable/disable words around the read, as the real
    sysfs ``rom`` attribute requires. A fake tree of plain files cannot honour
    that protocol (a write would overwrite the image), so tests and the sandbox
    turn it off; the read, hash and comparison are the same.
    """

    def __init__(
        self, sysfs_root: Path, golden: GoldenTable, toggle_rom: bool = True, max_rom_bytes: int = 16 * 1024 * 1024
    ) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.golden = golden
        self.toggle_rom = toggle_rom
        self.max_rom_bytes = max_rom_bytes

    def _device_dir(self, bdf: str) -> Path:
        return self.sysfs_root / "bus" / "pci" / "devices" / bdf

    def _read_attr(self, d: Path, name: str) -> str:
        return (d / name).read_text().strip().lower()

    def read_rom(self, bdf: str) -> bytes:
        rom = self._device_dir(bdf) / "rom"
        if self.toggle_rom:
            rom.write_text("1")
        try:
            with rom.open("rb") as f:
                return f.read(self.max_rom_bytes)
        finally:
            if self.toggle_rom:
                rom.write_text("0")

    def check(self, pci_address: str) -> CheckResult:
        d = self._device_dir(pci_address)
        if not d.exists():
            return CheckResult(
                False,
                "DeviceVanished",
                f"{pci_address} is no longer on the PCI bus (sysfs entry gone during the check)",
            )
        try:
            vendor = self._read_attr(d, "vendor")
            device = self._read_attr(d, "device")
            pci_class = self._read_attr(d, "class")
        except OSError as exc:
            return CheckResult(False, "DeviceVanished", f"{pci_address}: cannot read its identity: {exc}")
        if _hex(vendor) != NVIDIA_VENDOR or not pci_class.startswith("0x0302"):
            return CheckResult(
                False,
                "IdentityChanged",
                f"{pci_address} now reports vendor {vendor} class {pci_class}; expected an NVIDIA 3D controller",
            )
        driver_link = d / "driver"
        driver = Path(driver_link.readlink()).name if driver_link.is_symlink() else None
        if not driver or "vfio" not in driver:
            return CheckResult(
                False,
                "NotBoundToVfio",
                f"{pci_address} is bound to {driver or 'no driver'}; it must stay on vfio-pci between tenants",
            )
        golden = self.golden.by_device_id.get(device)
        if golden is None:
            return CheckResult(
                False,
                "NoGoldenFirmware",
                f"no golden firmware is configured for PCI device id {device}; cannot verify {pci_address}",
            )
        if not (d / "rom").exists():
            # Seen on a real H200 handed to a VM by its hypervisor: the device is there, its
            # ``rom`` attribute is not, and the enable write fails with EACCES, which says nothing.
            return CheckResult(
                False,
                "NoRom",
                f"{pci_address} exposes no expansion ROM in sysfs (no 'rom' attribute: the device has no "
                "ROM BAR, or a hypervisor between it and this node hides it); its firmware cannot be "
                "verified here",
            )
        try:
            image = self.read_rom(pci_address)
        except OSError as exc:
            gone = not d.exists()
            return CheckResult(
                False,
                "DeviceVanished" if gone else "RomUnreadable",
                f"{pci_address}: reading the expansion ROM failed: {exc}",
            )
        if not image.startswith(ROM_SIGNATURE):
            return CheckResult(
                False, "RomInvalid", f"{pci_address}: expansion ROM has no 0x55AA signature ({len(image)} bytes read)"
            )
        digest = hashlib.sha256(image).hexdigest()
        version = rom_version(image)
        if golden.versions and version not in golden.versions:
            return CheckResult(
                False,
                "RomVersionMismatch",
                f"{pci_address}: ROM version {version or 'unreadable'} is not one of "
                f"{', '.join(sorted(golden.versions))}",
                digest,
                version,
            )
        if digest not in golden.sha256:
            return CheckResult(
                False,
                "RomMismatch",
                f"{pci_address}: ROM sha256 {digest[:16]}… matches no golden image for {device}"
                f" (version string says {version or 'nothing'})",
                digest,
                version,
            )
        return CheckResult(True, "CheckPassed", f"{pci_address}: firmware {version} verified", digest, version)
