"""A fake sysfs + /dev tree of an HGX H100 8-GPU board, for tests and the sandbox.

Real GPU nodes cannot be had here, so every component that reads PCI devices
takes a configurable root and is pointed at a tree built by ``build_hgx_h100``:

    <root>/sys/bus/pci/devices/<BDF>/{vendor,device,class,numa_node,rom,
                                      driver -> ../../drivers/<drv>,
                                      iommu_group -> /sys/kernel/iommu_groups/<N>,
                                      vfio-dev/vfio<K>/ (iommufd variant)}
    <root>/sys/bus/pci/drivers/{vfio-pci,nvidia}/<BDF> -> device
    <root>/sys/kernel/iommu_groups/<N>/devices/<BDF> -> device
    <root>/dev/vfio/{vfio,<N>}, <root>/dev/vfio/devices/vfio<K>, <root>/dev/iommu
    <root>/board.json   (what Fabric Manager would know: physical id <-> BDF)

Device nodes are plain files (tests cannot mknod); symlinks are relative so the
tree can move. Addresses and ids follow a DGX H100: GPUs on buses 18/2a/3a/5d
(NUMA 0) and 9a/ab/ba/db (NUMA 1), four NVSwitches (bridge class, device 0x22a3)
and the PMC-Sierra NVSwitch memory controller at 0000:03:00.1.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.platforms import DGX_H100

NVIDIA_VENDOR = "0x10de"
H100_SXM5_DEVICE = "0x2330"
GPU_CLASS = "0x030200"
NVSWITCH_DEVICE = "0x22a3"
NVSWITCH_CLASS = "0x068000"
PMC_SIERRA_VENDOR = "0x11f8"
MEMORY_CONTROLLER_DEVICE = "0x4128"
MEMORY_CONTROLLER_CLASS = "0x058000"

#: The board follows the DGX H100 layout of the core (Fabric Manager physical (module)
#: ids do not follow PCI bus order there; this fake makes that visible on purpose).
GPU_BDFS: tuple[str, ...] = DGX_H100.gpu_bdfs
GPU_PHYSICAL_IDS: tuple[int, ...] = DGX_H100.gpu_physical_ids
NVSWITCH_BDFS: tuple[str, ...] = DGX_H100.nvswitch_bdfs
MEMORY_CONTROLLER_BDF = "0000:03:00.1"

GOLDEN_ROM_VERSION = "96.00.74.00.01"


def rom_image(version: str = GOLDEN_ROM_VERSION, tampered: bool = False) -> bytes:
    """A small PCI expansion ROM image: 0x55AA signature, a version string, padding.

    ``tampered`` flips payload bytes while keeping the signature and version, as a
    re-flashed image that claims the same version would.
    """
    header = b"\x55\xaa" + b"\x00" * 22 + b"\x1c\x00"  # PCIR pointer at 0x18
    pcir = b"PCIR" + bytes.fromhex("de103023") + b"\x00" * 16
    body = f"NVIDIA GH100 VBIOS Version {version}\x00".encode()
    payload = bytes((i * 7 + 3) % 256 for i in range(4096))
    if tampered:
        payload = bytes(b ^ 0xFF for b in payload[:64]) + payload[64:]
    image = header + pcir + body + payload
    return image + b"\x00" * (8192 - len(image))


def golden_rom_sha256(version: str = GOLDEN_ROM_VERSION) -> str:
    return hashlib.sha256(rom_image(version)).hexdigest()


@dataclass
class FakeDevice:
    bdf: str
    kind: str  # "gpu" | "nvswitch" | "memory-controller"
    vendor: str
    device: str
    pci_class: str
    iommu_group: int
    numa_node: int
    driver: str | None
    physical_id: int | None = None
    vfio_dev: int | None = None  # /dev/vfio/devices/vfio<K> (iommufd)


@dataclass
class FakeBoard:
    """A built tree and what is in it."""

    root: Path
    variant: str
    iommufd: bool
    devices: list[FakeDevice] = field(default_factory=list)

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def gpus(self) -> list[FakeDevice]:
        return [d for d in self.devices if d.kind == "gpu"]

    @property
    def nvswitches(self) -> list[FakeDevice]:
        return [d for d in self.devices if d.kind == "nvswitch"]

    @property
    def memory_controller(self) -> FakeDevice:
        return next(d for d in self.devices if d.kind == "memory-controller")

    def device_dir(self, bdf: str) -> Path:
        return self.sysfs / "bus" / "pci" / "devices" / bdf

    def physical_id_map(self) -> dict[int, str]:
        """Fabric Manager's view: physical id -> PCI bus id."""
        return {d.physical_id: d.bdf for d in self.gpus if d.physical_id is not None}

    # --- mutations tests and the sandbox use to play hardware events -------------
    def remove_device(self, bdf: str) -> None:
        """The device vanishes (hot-unplug, fell off the bus)."""
        dev = next(d for d in self.devices if d.bdf == bdf)
        _rm(self.device_dir(bdf))
        _rm(self.sysfs / "kernel" / "iommu_groups" / str(dev.iommu_group) / "devices" / bdf)
        if dev.driver:
            _rm(self.sysfs / "bus" / "pci" / "drivers" / dev.driver / bdf)

    def remove_vfio_node(self, bdf: str) -> Path:
        dev = next(d for d in self.devices if d.bdf == bdf)
        node = self.dev / "vfio" / str(dev.iommu_group)
        _rm(node)
        return node

    def restore_vfio_node(self, bdf: str) -> None:
        dev = next(d for d in self.devices if d.bdf == bdf)
        (self.dev / "vfio" / str(dev.iommu_group)).write_bytes(b"")

    def resets(self, bdf: str) -> int:
        """How many times the device was reset through its sysfs ``reset`` attribute
        (``core.gpu_reset`` appends one line per reset)."""
        try:
            return (self.device_dir(bdf) / "reset").read_text().count("1")
        except FileNotFoundError:
            return 0

    def reset_log(self) -> dict[str, int]:
        """Resets per GPU PCI address (GPUs reset at least once)."""
        return {d.bdf: n for d in self.gpus if (n := self.resets(d.bdf))}

    def write_rom(self, bdf: str, content: bytes) -> None:
        (self.device_dir(bdf) / "rom").write_bytes(content)

    def bind(self, bdf: str, driver: str | None) -> None:
        """Rebind the device to another driver (or unbind it with None)."""
        dev = next(d for d in self.devices if d.bdf == bdf)
        if dev.driver:
            _rm(self.sysfs / "bus" / "pci" / "drivers" / dev.driver / bdf)
        _rm(self.device_dir(bdf) / "driver")
        dev.driver = driver
        if driver:
            _link_driver(self.sysfs, bdf, driver)
        self._write_manifest()

    def _write_manifest(self) -> None:
        data = {
            "variant": self.variant,
            "iommufd": self.iommufd,
            "devices": [asdict(d) for d in self.devices],
        }
        (self.root / "board.json").write_text(json.dumps(data, indent=2))


def _rm(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        for child in path.iterdir():
            _rm(child)
        path.rmdir()


def _relink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def _link_driver(sysfs: Path, bdf: str, driver: str) -> None:
    drv_dir = sysfs / "bus" / "pci" / "drivers" / driver
    drv_dir.mkdir(parents=True, exist_ok=True)
    dev_dir = sysfs / "bus" / "pci" / "devices" / bdf
    _relink(dev_dir / "driver", drv_dir)
    _relink(drv_dir / bdf, dev_dir)


def build_hgx_h100(
    root: Path,
    *,
    variant: str = "dgx",
    gpu_drivers: dict[str, str | None] | None = None,
    iommufd: bool = False,
    first_iommu_group: int = 20,
) -> FakeBoard:
    """Build the tree under ``root`` and return what it holds.

    variant: "dgx" gives each NVSwitch and the memory controller its own IOMMU
    group; "supermicro" puts all four NVSwitches and the memory controller behind
    one group, as Supermicro HGX boards do.
    gpu_drivers: BDF -> driver name (or None for unbound) overriding "vfio-pci".
    iommufd: also create /dev/iommu, /dev/vfio/devices/vfioN and vfio-dev/ entries.
    """
    if variant not in ("dgx", "supermicro"):
        raise ValueError(f"variant must be 'dgx' or 'supermicro', got {variant!r}")
    root = Path(root)
    board = FakeBoard(root=root, variant=variant, iommufd=iommufd)
    overrides = gpu_drivers or {}
    group = first_iommu_group
    vfio_index = 0
    for i, (bdf, pid) in enumerate(zip(GPU_BDFS, GPU_PHYSICAL_IDS, strict=True)):
        driver = overrides.get(bdf, "vfio-pci")
        board.devices.append(
            FakeDevice(
                bdf,
                "gpu",
                NVIDIA_VENDOR,
                H100_SXM5_DEVICE,
                GPU_CLASS,
                group,
                0 if i < 4 else 1,
                driver,
                physical_id=pid,
                vfio_dev=vfio_index if (iommufd and driver and "vfio" in driver) else None,
            )
        )
        if iommufd and driver and "vfio" in driver:
            vfio_index += 1
        group += 1
    shared_group = group
    for bdf in NVSWITCH_BDFS:
        board.devices.append(
            FakeDevice(
                bdf,
                "nvswitch",
                NVIDIA_VENDOR,
                NVSWITCH_DEVICE,
                NVSWITCH_CLASS,
                shared_group if variant == "supermicro" else group,
                0,
                "vfio-pci",
            )
        )
        if variant == "dgx":
            group += 1
    board.devices.append(
        FakeDevice(
            MEMORY_CONTROLLER_BDF,
            "memory-controller",
            PMC_SIERRA_VENDOR,
            MEMORY_CONTROLLER_DEVICE,
            MEMORY_CONTROLLER_CLASS,
            shared_group if variant == "supermicro" else group,
            0,
            "vfio-pci",
        )
    )

    sysfs = board.sysfs
    for d in board.devices:
        dev_dir = sysfs / "bus" / "pci" / "devices" / d.bdf
        dev_dir.mkdir(parents=True, exist_ok=True)
        (dev_dir / "vendor").write_text(d.vendor + "\n")
        (dev_dir / "device").write_text(d.device + "\n")
        (dev_dir / "class").write_text(d.pci_class + "\n")
        (dev_dir / "numa_node").write_text(f"{d.numa_node}\n")
        (dev_dir / "subsystem_vendor").write_text(d.vendor + "\n")
        group_dir = sysfs / "kernel" / "iommu_groups" / str(d.iommu_group)
        (group_dir / "devices").mkdir(parents=True, exist_ok=True)
        _relink(dev_dir / "iommu_group", group_dir)
        _relink(group_dir / "devices" / d.bdf, dev_dir)
        if d.driver:
            _link_driver(sysfs, d.bdf, d.driver)
        if d.kind == "gpu":
            (dev_dir / "rom").write_bytes(rom_image())
            # What Linux 5.15+ offers for an H100 behind a PCIe switch port; see core.gpu_reset.
            (dev_dir / "reset_method").write_text("flr bus\n")
            (dev_dir / "reset").write_text("")
        if d.vfio_dev is not None:
            (dev_dir / "vfio-dev" / f"vfio{d.vfio_dev}").mkdir(parents=True, exist_ok=True)

    vfio = board.dev / "vfio"
    vfio.mkdir(parents=True, exist_ok=True)
    (vfio / "vfio").write_bytes(b"")
    for g in sorted({d.iommu_group for d in board.devices if d.driver and "vfio" in d.driver}):
        (vfio / str(g)).write_bytes(b"")
    if iommufd:
        (vfio / "devices").mkdir(exist_ok=True)
        for d in board.devices:
            if d.vfio_dev is not None:
                (vfio / "devices" / f"vfio{d.vfio_dev}").write_bytes(b"")
        (board.dev / "iommu").write_bytes(b"")
    board._write_manifest()
    return board


def load_board(root: Path) -> FakeBoard:
    """Re-read a tree built earlier (the sandbox builds it once per node)."""
    data = json.loads((Path(root) / "board.json").read_text())
    return FakeBoard(
        root=Path(root),
        variant=data["variant"],
        iommufd=data["iommufd"],
        devices=[FakeDevice(**d) for d in data["devices"]],
    )
