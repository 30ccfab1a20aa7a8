"""Adapter: discover vfio-bound NVIDIA GPUs in sysfs and check their device nodes.

Reads, under a configurable root (tests use devtools.fake_sysfs)::

    <sysfs>/bus/pci/devices/<BDF>/{vendor,device,class,numa_node,driver,iommu_group,vfio-dev/}
    <sysfs>/kernel/iommu_groups/<N>/devices/
    <dev>/vfio/<N>, <dev>/vfio/devices/vfio<K>, <dev>/iommu

A GPU is advertised only when it is NVIDIA (vendor 0x10de), a 3D controller
(class 0x0302xx), bound to a vfio driver, alone in its IOMMU group (a group is
passed through whole) and its device node exists. NVSwitches (bridge class) and
their PMC-Sierra memory controller never qualify. Unreadable or garbage files make
the device left out with a clear reason; discovery itself never raises for them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from core.vfio_devices import (
    GPU,
    GPU_CLASS_PREFIX,
    NVIDIA_VENDOR,
    Inventory,
    LeftOut,
    model_name,
)

logger = logging.getLogger(__name__)


class _Unusable(Exception):
    """A sysfs value that cannot be used; the message says which file and why."""


def _read_hex(path: Path, what: str) -> int:
    try:
        text = path.read_bytes().decode("ascii", errors="replace").strip()
    except FileNotFoundError:
        raise _Unusable(f"{path} is missing ({what})") from None
    except OSError as exc:
        raise _Unusable(f"{path} unreadable ({what}): {exc.strerror or exc}") from None
    try:
        return int(text, 16)
    except ValueError:
        raise _Unusable(f"{path} holds {text[:40]!r}, expected a hex {what} like 0x10de") from None


def _read_numa(path: Path) -> tuple[int | None, str | None]:
    try:
        text = path.read_bytes().decode("ascii", errors="replace").strip()
    except OSError:
        return None, f"{path} is missing or unreadable; NUMA node unknown"
    try:
        node = int(text)
    except ValueError:
        return None, f"{path} holds {text[:40]!r}, expected an integer NUMA node; NUMA node unknown"
    return (node if node >= 0 else None), None


def _link_name(path: Path) -> str | None:
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None


def scan(sysfs_root: Path, dev_root: Path) -> Inventory:
    """One discovery pass over the PCI devices under ``sysfs_root``."""
    devices_dir = sysfs_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(p.name for p in devices_dir.iterdir())
    except OSError as exc:
        problem = f"cannot list {devices_dir}: {exc.strerror or exc}; no GPUs discovered"
        return Inventory(problems=(problem,))

    gpus: list[GPU] = []
    left_out: list[LeftOut] = []
    all_gpus: list[str] = []
    problems: list[str] = []
    for bdf in entries:
        dev = devices_dir / bdf
        try:
            vendor = _read_hex(dev / "vendor", "PCI vendor id")
        except _Unusable as exc:
            problems.append(f"{bdf}: {exc}")  # cannot tell whether it is a GPU at all
            continue
        if vendor != NVIDIA_VENDOR:
            continue  # e.g. the NVSwitch memory controller (PMC-Sierra)
        try:
            pci_class = _read_hex(dev / "class", "PCI class")
            if pci_class >> 8 != GPU_CLASS_PREFIX:
                continue  # NVSwitch (bridge class) and other NVIDIA functions
            all_gpus.append(bdf)
            device_id = _read_hex(dev / "device", "PCI device id")
        except _Unusable as exc:
            problems.append(f"{bdf}: {exc}")
            left_out.append(LeftOut(bdf, _link_name(dev / "driver"), str(exc)))
            continue

        driver = _link_name(dev / "driver")
        if driver is None or "vfio" not in driver:
            reason = f"bound to {driver}, not a vfio driver" if driver else "not bound to any driver"
            left_out.append(LeftOut(bdf, driver, reason))
            continue
        group_name = _link_name(dev / "iommu_group")
        if group_name is None or not group_name.isdigit():
            reason = f"{dev / 'iommu_group'} is missing or not a group link ({group_name!r})"
            problems.append(f"{bdf}: {reason}")
            left_out.append(LeftOut(bdf, driver, reason))
            continue
        group = int(group_name)
        peers = _group_peers(sysfs_root, group, bdf)
        if peers:
            reason = (
                f"IOMMU group {group} also holds {', '.join(peers)}; a group is passed "
                "through whole, so this GPU cannot go to a tenant alone"
            )
            left_out.append(LeftOut(bdf, driver, reason))
            continue
        numa, numa_problem = _read_numa(dev / "numa_node")
        if numa_problem:
            problems.append(f"{bdf}: {numa_problem}")
        vfio_dev = _vfio_cdev(dev)
        iommufd = (
            vfio_dev is not None
            and (dev_root / "vfio" / "devices" / vfio_dev).exists()
            and (dev_root / "iommu").exists()
        )
        gpu = GPU(
            bdf=bdf,
            device_id=device_id,
            model=model_name(device_id),
            driver=driver,
            iommu_group=group,
            numa_node=numa,
            vfio_device=vfio_dev,
            iommufd=iommufd,
        )
        missing = missing_nodes(gpu, dev_root)
        if missing:
            left_out.append(LeftOut(bdf, driver, f"device node {missing[0]} is missing"))
            continue
        gpus.append(gpu)
    return Inventory(gpus=tuple(gpus), left_out=tuple(left_out), all_gpu_bdfs=tuple(all_gpus), problems=tuple(problems))


def _group_peers(sysfs_root: Path, group: int, bdf: str) -> list[str]:
    """Other devices in the GPU's IOMMU group (PCI bridges excepted, as vfio does)."""
    devices = sysfs_root / "kernel" / "iommu_groups" / str(group) / "devices"
    try:
        names = sorted(p.name for p in devices.iterdir())
    except OSError:
        return []
    peers = []
    for name in names:
        if name == bdf:
            continue
        try:
            cls = _read_hex(sysfs_root / "bus" / "pci" / "devices" / name / "class", "PCI class")
        except _Unusable:
            cls = 0
        if cls >> 16 == 0x06 and (cls >> 8) & 0xFF == 0x04:  # PCI-to-PCI bridge
            continue
        peers.append(name)
    return peers


def _vfio_cdev(dev: Path) -> str | None:
    try:
        names = sorted(p.name for p in (dev / "vfio-dev").iterdir() if p.name.startswith("vfio"))
    except OSError:
        return None
    return names[0] if names else None


def host_path(container_path: str, dev_root: Path) -> Path:
    """Where a ``/dev/...`` node of the spec lies on this host (under ``dev_root``)."""
    return dev_root / Path(container_path).relative_to("/dev")


def missing_nodes(gpu: GPU, dev_root: Path) -> list[str]:
    """The GPU's device nodes that do not exist on the host (container paths)."""
    return [p for p in gpu.device_nodes() if not host_path(p, dev_root).exists()]


def sysfs_entry_present(sysfs_root: Path, bdf: str) -> bool:
    return (sysfs_root / "bus" / "pci" / "devices" / bdf).exists()
