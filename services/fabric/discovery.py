"""Find the devices the Fabric Manager service VM needs: NVSwitches and their memory controller.

Pure reads of sysfs under a configurable root (tests point it at a fake tree).
In the shared NVSwitch model the service VM gets every NVSwitch of the board
plus, on HGX H100, the PMC-Sierra memory controller (``11f8:4128``) behind them.

IOMMU groups: vfio passes whole groups. DGX boards give every NVSwitch its own
group; Supermicro boards put all NVSwitches and the memory controller in one
group. Both work the same way here: every group that holds a device we pass
must contain only devices we pass, or devices bound to ``vfio-pci`` (or PCI
bridges, which vfio tolerates); anything else would make the group unusable, and
:func:`check_iommu_groups` says which device is in the way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from services.fabric.errors import DiscoveryError

NVIDIA_VENDOR = 0x10DE
PMC_SIERRA_VENDOR = 0x11F8
#: NVSwitch PCI device ids: 0x1af1 (A100 NVSwitch gen 2), 0x22a3 (H100 NVSwitch gen 3).
NVSWITCH_DEVICE_IDS = frozenset({0x1AF1, 0x22A3})
#: The NVSwitch memory controller on HGX H100 (PMC-Sierra 4128).
MEMORY_CONTROLLER_IDS = frozenset({(PMC_SIERRA_VENDOR, 0x4128)})
BRIDGE_CLASS_PREFIX = 0x0604  # PCI-to-PCI bridge

_BDF = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalize_bdf(value: str, *, field: str = "pci address") -> str:
    """``5:0.0``-ish inputs are refused; ``05:00.0`` and ``0000:05:00.0`` give ``0000:05:00.0``."""
    m = _BDF.match(value.strip())
    if not m:
        raise ValueError(f"{field}: {value!r} is not a PCI address like 0000:05:00.0")
    dom, bus, slot, fn = m.groups()
    return f"{(dom or '0000').lower()}:{bus.lower()}:{slot.lower()}.{fn}"


@dataclass(frozen=True)
class PciDevice:
    """One PCI function as sysfs shows it."""

    bdf: str
    vendor: int
    device: int
    pci_class: int
    iommu_group: int | None
    driver: str | None

    @property
    def domain(self) -> int:
        return int(self.bdf[0:4], 16)

    @property
    def bus(self) -> int:
        return int(self.bdf[5:7], 16)

    @property
    def slot(self) -> int:
        return int(self.bdf[8:10], 16)

    @property
    def function(self) -> int:
        return int(self.bdf[11], 16)


@dataclass(frozen=True)
class FabricDevices:
    """What the service VM gets passed through."""

    nvswitches: tuple[PciDevice, ...]
    memory_controller: PciDevice | None
    iommu_groups: dict[int, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def passthrough(self) -> tuple[PciDevice, ...]:
        mc = (self.memory_controller,) if self.memory_controller else ()
        return (*self.nvswitches, *mc)

    @property
    def shared_iommu_group(self) -> bool:
        """True on Supermicro-style boards: every passed device sits in one IOMMU group."""
        groups = {d.iommu_group for d in self.passthrough}
        return len(self.passthrough) > 1 and len(groups) == 1


def _read_hex(path: Path) -> int:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError) as exc:
        raise DiscoveryError(f"cannot read {path}: {exc}") from exc


def _devices_dir(sysfs_root: Path) -> Path:
    return Path(sysfs_root) / "bus" / "pci" / "devices"


def read_device(sysfs_root: Path, bdf: str) -> PciDevice:
    """Read one PCI function; DiscoveryError if it is not there."""
    d = _devices_dir(sysfs_root) / bdf
    if not d.exists():
        raise DiscoveryError(f"PCI device {bdf} not found under {_devices_dir(sysfs_root)}")
    group_link = d / "iommu_group"
    group = int(group_link.resolve().name) if group_link.exists() else None
    driver_link = d / "driver"
    driver = driver_link.resolve().name if driver_link.exists() else None
    return PciDevice(
        bdf=bdf,
        vendor=_read_hex(d / "vendor"),
        device=_read_hex(d / "device"),
        pci_class=_read_hex(d / "class"),
        iommu_group=group,
        driver=driver,
    )


def list_devices(sysfs_root: Path) -> list[PciDevice]:
    devices_dir = _devices_dir(sysfs_root)
    if not devices_dir.is_dir():
        raise DiscoveryError(f"no PCI devices directory at {devices_dir}")
    return [read_device(sysfs_root, p.name) for p in sorted(devices_dir.iterdir())]


def is_nvswitch(dev: PciDevice) -> bool:
    return dev.vendor == NVIDIA_VENDOR and dev.device in NVSWITCH_DEVICE_IDS


def is_memory_controller(dev: PciDevice) -> bool:
    return (dev.vendor, dev.device) in MEMORY_CONTROLLER_IDS


def iommu_group_members(sysfs_root: Path, group: int) -> tuple[str, ...]:
    gdir = Path(sysfs_root) / "kernel" / "iommu_groups" / str(group) / "devices"
    if not gdir.is_dir():
        return ()
    return tuple(sorted(p.name for p in gdir.iterdir()))


def check_iommu_groups(sysfs_root: Path, passed: Iterable[PciDevice]) -> dict[int, tuple[str, ...]]:
    """Every IOMMU group of the passed devices must be viable for vfio; returns the groups.

    A group member that is neither passed, nor bound to vfio-pci, nor a PCI bridge
    raises DiscoveryError naming it and its driver.
    """
    passed = list(passed)
    names = {d.bdf for d in passed}
    groups: dict[int, tuple[str, ...]] = {}
    for dev in passed:
        if dev.iommu_group is None:
            raise DiscoveryError(f"{dev.bdf} has no IOMMU group (is the IOMMU enabled? intel_iommu=on)")
        if dev.iommu_group in groups:
            continue
        members = iommu_group_members(sysfs_root, dev.iommu_group)
        groups[dev.iommu_group] = members
        for bdf in members:
            if bdf in names:
                continue
            other = read_device(sysfs_root, bdf)
            if other.driver == "vfio-pci" or (other.pci_class >> 8) == BRIDGE_CLASS_PREFIX:
                continue
            raise DiscoveryError(
                f"IOMMU group {dev.iommu_group} of {dev.bdf} also holds {bdf} "
                f"(driver {other.driver or 'none'}); bind it to vfio-pci or pass it too"
            )
    return groups


def discover_fabric_devices(
    sysfs_root: Path,
    *,
    nvswitches: Iterable[str] = (),
    memory_controller: str | None = None,
    require_vfio: bool = False,
) -> FabricDevices:
    """NVSwitches and memory controller: the configured addresses, or those found in sysfs.

    ``require_vfio``: refuse devices not bound to vfio-pci (libvirt's managed hostdevs
    rebind them itself, so the default only checks IOMMU group viability).
    """
    configured = [normalize_bdf(b, field="nvswitches") for b in nvswitches]
    if configured:
        switches = [read_device(sysfs_root, b) for b in configured]
    else:
        switches = [d for d in list_devices(sysfs_root) if is_nvswitch(d)]
    if not switches:
        raise DiscoveryError(
            f"no NVSwitch found under {_devices_dir(sysfs_root)} (NVIDIA devices "
            f"{sorted(hex(i) for i in NVSWITCH_DEVICE_IDS)}); configure GPUCAAS_FABRIC_NVSWITCHES"
        )
    if memory_controller:
        mc: PciDevice | None = read_device(sysfs_root, normalize_bdf(memory_controller, field="memory_controller"))
    else:
        found = [d for d in list_devices(sysfs_root) if is_memory_controller(d)]
        mc = found[0] if found else None
    passed = [*switches, *([mc] if mc else [])]
    if require_vfio:
        for d in passed:
            if d.driver != "vfio-pci":
                raise DiscoveryError(f"{d.bdf} is bound to {d.driver or 'no driver'}, expected vfio-pci")
    groups = check_iommu_groups(sysfs_root, passed)
    return FabricDevices(tuple(sorted(switches, key=lambda d: d.bdf)), mc, groups)
