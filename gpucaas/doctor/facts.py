"""Gather what the checks judge: the one module of the doctor that reads the host.

Everything here returns plain data; nothing decides. A tree or file that is not
there becomes ``None`` (or ``exists=False``), never an exception, so that one
missing part cannot hide the verdict on the others.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Any

from gpucaas.doctor.paths import HostPaths

logger = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
PMC_SIERRA_VENDOR = 0x11F8


@dataclass(frozen=True)
class PciDevice:
    bdf: str
    vendor: int
    device: int
    pci_class: int  # 24-bit class code, e.g. 0x030200
    driver: str | None
    iommu_group: int | None

    @property
    def base_class(self) -> int:
        return self.pci_class >> 16

    @property
    def subclass(self) -> int:
        return self.pci_class >> 8

    @property
    def is_nvidia_gpu(self) -> bool:
        """Display (0x03xx) class with NVIDIA's vendor id: a GPU (3D controller or VGA)."""
        return self.vendor == NVIDIA_VENDOR and self.base_class == 0x03

    @property
    def is_nvswitch(self) -> bool:
        """NVIDIA bridge or "other bridge" function: an NVSwitch on HGX/DGX boards."""
        return self.vendor == NVIDIA_VENDOR and self.subclass in (0x0680, 0x0604)

    @property
    def is_nvswitch_memory_controller(self) -> bool:
        """The PMC-Sierra memory controller that goes with the NVSwitches on HGX boards."""
        return self.vendor == PMC_SIERRA_VENDOR and self.subclass == 0x0580

    @property
    def is_bridge(self) -> bool:
        return self.subclass == 0x0604 and self.vendor != NVIDIA_VENDOR

    @property
    def kind(self) -> str:
        if self.is_nvidia_gpu:
            return "gpu"
        if self.is_nvswitch:
            return "nvswitch"
        if self.is_nvswitch_memory_controller:
            return "memory-controller"
        return "other"


@dataclass(frozen=True)
class DirFacts:
    path: Path
    exists: bool
    is_dir: bool
    writable: bool
    entries: tuple[str, ...] = ()


@dataclass(frozen=True)
class SocketFacts:
    path: Path
    exists: bool
    is_socket: bool
    connected: bool = False
    error: str | None = None


@dataclass(frozen=True)
class ContainerdFacts:
    path: Path
    exists: bool
    config: dict[str, Any] | None = None
    error: str | None = None
    #: files merged into ``config``: the main file, then its ``imports`` in order
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class FabricFacts:
    socket: SocketFacts
    health: Mapping[str, Any] | None = None
    error: str | None = None
    #: the fabric service's /v1/topology (``core.fabric_messages.Topology``): GPUs by physical id
    #: with PCI address and its source
    topology: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class KubeFacts:
    """What the Kubernetes API answered the node's question (list GPULeases, as the device plugin does)."""

    server: str | None
    ok: bool
    kind: str | None = None  # the core adapter's error class: Forbidden, Unavailable, NotFound, ...
    error: str | None = None


@dataclass(frozen=True)
class HostFacts:
    paths: HostPaths
    pci: tuple[PciDevice, ...] | None
    iommu_groups: dict[int, tuple[str, ...]] | None
    vfio_pci_driver: bool
    dev_vfio: frozenset[str] | None
    dev_iommu: bool
    cmdline: str | None
    modules: tuple[str, ...] | None
    meminfo: dict[str, int] | None
    hugepage_pools: dict[int, int] = field(default_factory=dict)  # page size kB -> nr_hugepages
    mounts: tuple[tuple[str, str, str], ...] | None = None
    cdi: DirFacts | None = None
    device_plugins: DirFacts | None = None
    kubelet_socket: SocketFacts | None = None
    containerd: ContainerdFacts | None = None
    libvirt: SocketFacts | None = None
    fabric: FabricFacts | None = None
    kube: KubeFacts | None = None


# --- readers ----------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
        return None


def _hex(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def read_pci(sysfs: Path) -> tuple[PciDevice, ...] | None:
    devices_dir = sysfs / "bus" / "pci" / "devices"
    if not devices_dir.is_dir():
        return None
    devices = []
    for entry in sorted(devices_dir.iterdir()):
        driver_link = entry / "driver"
        driver = os.path.basename(os.readlink(driver_link)) if driver_link.is_symlink() else None
        group_link = entry / "iommu_group"
        group = int(os.path.basename(os.readlink(group_link))) if group_link.is_symlink() else None
        devices.append(
            PciDevice(
                bdf=entry.name,
                vendor=_hex(entry / "vendor") or 0,
                device=_hex(entry / "device") or 0,
                pci_class=_hex(entry / "class") or 0,
                driver=driver,
                iommu_group=group,
            )
        )
    return tuple(devices)


def read_iommu_groups(sysfs: Path) -> dict[int, tuple[str, ...]] | None:
    groups_dir = sysfs / "kernel" / "iommu_groups"
    if not groups_dir.is_dir():
        return None
    groups: dict[int, tuple[str, ...]] = {}
    for group in groups_dir.iterdir():
        if not group.name.isdigit():
            continue
        members = group / "devices"
        groups[int(group.name)] = tuple(sorted(p.name for p in members.iterdir())) if members.is_dir() else ()
    return groups


def read_dev_vfio(dev: Path) -> frozenset[str] | None:
    vfio = dev / "vfio"
    if not vfio.is_dir():
        return None
    return frozenset(p.name for p in vfio.iterdir())


def read_modules(proc: Path) -> tuple[str, ...] | None:
    text = _read(proc / "modules")
    if text is None:
        return None
    return tuple(line.split()[0] for line in text.splitlines() if line.strip())


def read_meminfo(proc: Path) -> dict[str, int] | None:
    text = _read(proc / "meminfo")
    if text is None:
        return None
    info: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            info[key.strip()] = int(parts[0])
    return info


def read_hugepage_pools(sysfs: Path) -> dict[int, int]:
    """Page size in kB -> pages reserved, from /sys/kernel/mm/hugepages/hugepages-<N>kB."""
    pools: dict[int, int] = {}
    base = sysfs / "kernel" / "mm" / "hugepages"
    if not base.is_dir():
        return pools
    for pool in base.iterdir():
        size = pool.name.removeprefix("hugepages-").removesuffix("kB")
        count = _read(pool / "nr_hugepages")
        if size.isdigit() and count is not None and count.strip().isdigit():
            pools[int(size)] = int(count.strip())
    return pools


def read_mounts(proc: Path) -> tuple[tuple[str, str, str], ...] | None:
    text = _read(proc / "mounts")
    if text is None:
        return None
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append((parts[0], parts[1], parts[2]))
    return tuple(mounts)


def read_dir(path: Path) -> DirFacts:
    exists = path.exists()
    is_dir = path.is_dir()
    entries = tuple(sorted(p.name for p in path.iterdir())) if is_dir else ()
    return DirFacts(path, exists, is_dir, is_dir and os.access(path, os.W_OK), entries)


def probe_socket(path: Path, *, connect: bool, timeout: float = 2.0) -> SocketFacts:
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return SocketFacts(path, exists=False, is_socket=False)
    except PermissionError as exc:
        return SocketFacts(path, exists=True, is_socket=False, error=str(exc))
    if not stat.S_ISSOCK(mode):
        return SocketFacts(path, exists=True, is_socket=False)
    if not connect:
        return SocketFacts(path, exists=True, is_socket=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        return SocketFacts(path, exists=True, is_socket=True, connected=False, error=exc.strerror or str(exc))
    finally:
        sock.close()
    return SocketFacts(path, exists=True, is_socket=True, connected=True)


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """containerd merges imported files table by table (later files win)."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_containerd(paths: HostPaths) -> ContainerdFacts:
    path = paths.containerd_config_path
    text = _read(path)
    if text is None:
        return ContainerdFacts(path, exists=False)
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return ContainerdFacts(path, exists=True, error=f"{path}: {exc}")
    sources = [str(path)]
    for pattern in config.get("imports", []) or []:
        rooted = paths.under_etc(pattern)
        if not rooted.is_absolute():
            rooted = path.parent / rooted
        for name in sorted(glob(str(rooted))):
            try:
                config = _merge(config, tomllib.loads(Path(name).read_text()))
            except tomllib.TOMLDecodeError as exc:
                return ContainerdFacts(path, exists=True, error=f"{name}: {exc}", sources=tuple(sources))
            sources.append(name)
    return ContainerdFacts(path, exists=True, config=config, sources=tuple(sources))


def probe_fabric(path: Path, *, timeout: float) -> FabricFacts:
    sock = probe_socket(path, connect=False)
    if not sock.is_socket:
        return FabricFacts(sock)
    from core.fabric_client import FabricClient, FabricError

    try:
        with FabricClient(path, timeout=timeout) as client:
            health = client.health()
            try:
                topology = client.topology()
            except FabricError:
                topology = None  # Fabric Manager down: health says so
    except FabricError as exc:
        return FabricFacts(SocketFacts(path, True, True, connected=exc.status is not None), error=str(exc))
    return FabricFacts(SocketFacts(path, True, True, connected=True), health=health, topology=topology)


def probe_kubernetes(kubeconfig: Path | None, *, timeout: float) -> KubeFacts | None:
    """Ask the API what the node's device plugin asks (list GPULeases); None when there is no configuration.

    Through the core adapter, so a refusal reads "forbidden: <user> cannot <verb> <resource>"
    and no answer "Kubernetes unreachable at <url>".
    """
    import os

    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    from core import crds
    from core.kube import NO_RETRY, Kube, KubeConnection, KubeError

    try:
        kube = Kube(
            KubeConnection(kubeconfig=kubeconfig, connect_timeout_s=timeout, read_timeout_s=timeout), retry=NO_RETRY
        )
    except KubeError as exc:
        return KubeFacts(None, False, type(exc).__name__, exc.summary())
    try:
        kube.call(
            kube.custom.list_cluster_custom_object,
            crds.GROUP,
            crds.VERSION,
            crds.GPULEASE_PLURAL,
            limit=1,
            what="list gpuleases",
        )
    except KubeError as exc:
        return KubeFacts(kube.server, False, type(exc).__name__, exc.summary())
    finally:
        kube.close()
    return KubeFacts(kube.server, True)


def gather(paths: HostPaths, *, probe_timeout: float = 3.0) -> HostFacts:
    """Read everything the checks need from the host (or the fake host under test)."""
    facts = HostFacts(
        paths=paths,
        pci=read_pci(paths.sysfs_root),
        iommu_groups=read_iommu_groups(paths.sysfs_root),
        vfio_pci_driver=(paths.sysfs_root / "bus" / "pci" / "drivers" / "vfio-pci").is_dir(),
        dev_vfio=read_dev_vfio(paths.dev_root),
        dev_iommu=(paths.dev_root / "iommu").exists(),
        cmdline=_read(paths.proc_root / "cmdline"),
        modules=read_modules(paths.proc_root),
        meminfo=read_meminfo(paths.proc_root),
        hugepage_pools=read_hugepage_pools(paths.sysfs_root),
        mounts=read_mounts(paths.proc_root),
        cdi=read_dir(paths.cdi_dir),
        device_plugins=read_dir(paths.device_plugin_dir),
        kubelet_socket=probe_socket(paths.device_plugin_dir / "kubelet.sock", connect=False),
        containerd=read_containerd(paths),
        libvirt=probe_socket(paths.libvirt_socket, connect=True, timeout=probe_timeout),
        fabric=probe_fabric(paths.fabric_socket, timeout=probe_timeout),
        kube=probe_kubernetes(paths.kubeconfig, timeout=probe_timeout),
    )
    logger.debug("gathered host facts under %s", paths)
    return facts
