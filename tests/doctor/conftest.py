"""A whole fake GPU node for the doctor: the HGX board's sysfs and /dev, plus /proc,
/etc/containerd (with the repository's own drop-in), the kubelet and CDI
directories, a listening libvirt socket and the real fabric service (simulated
Fabric Manager) on its unix socket."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.platforms import PlatformLayout
from devtools.fake_sysfs import FakeBoard
from gpucaas.doctor.paths import HostPaths
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app

REPO = Path(__file__).resolve().parents[2]
CONTAINERD_DROP_IN = REPO / "deploy" / "containerd" / "kata-qemu-nvidia-gpu.toml"

CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-6.8.0 root=/dev/nvme0n1p2 ro intel_iommu=on iommu=pt "
    "default_hugepagesz=1G hugepagesz=1G hugepages=512 vfio-pci.ids=10de:2330,10de:22a3,11f8:4128\n"
)
MODULES = """vfio_pci 16384 0 - Live 0x0000000000000000
vfio_pci_core 94208 1 vfio_pci, Live 0x0000000000000000
vfio_iommu_type1 49152 0 - Live 0x0000000000000000
vfio 69632 3 vfio_pci_core,vfio_iommu_type1, Live 0x0000000000000000
kvm_intel 487424 0 - Live 0x0000000000000000
kvm 1409024 1 kvm_intel, Live 0x0000000000000000
mlx5_core 2420736 0 - Live 0x0000000000000000
"""
HUGEPAGES_1G = 512


def meminfo(total_1g: int = HUGEPAGES_1G, free_1g: int | None = None) -> str:
    free = total_1g if free_1g is None else free_1g
    return (
        "MemTotal:       2113486848 kB\nMemFree:        1500000000 kB\n"
        f"HugePages_Total:   {total_1g}\nHugePages_Free:    {free}\nHugePages_Rsvd:        0\n"
        "HugePages_Surp:        0\nHugepagesize:    1048576 kB\nHugetlb:        536870912 kB\n"
    )


MOUNTS = """sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/dev/nvme0n1p2 / ext4 rw,relatime 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=1024M 0 0
"""


@dataclass
class FakeNode:
    """Everything ``gpucaas doctor`` looks at, under one tmp tree; tests break one part each."""

    board: FakeBoard
    root: Path
    sockets: Path
    fabric: SimulatedFabric
    paths: HostPaths
    _listeners: list[socket.socket] = field(default_factory=list)
    #: what the fabric service reports for its service VM (tests change it)
    vm_state: dict = field(default_factory=dict)

    @property
    def proc(self) -> Path:
        return self.root / "proc"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    def listen(self, path: Path) -> socket.socket:
        """A real listening unix socket at ``path`` (what libvirtd / the kubelet leave there)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(8)
        self._listeners.append(sock)
        return sock

    def cli_args(self) -> list[str]:
        p = self.paths
        return [
            "doctor",
            "--sysfs-root",
            str(p.sysfs_root),
            "--dev-root",
            str(p.dev_root),
            "--proc-root",
            str(p.proc_root),
            "--etc-root",
            str(p.etc_root),
            "--cdi-dir",
            str(p.cdi_dir),
            "--kubelet-dir",
            str(p.kubelet_dir),
            "--libvirt-socket",
            str(p.libvirt_socket),
            "--fabric-socket",
            str(p.fabric_socket),
            "--expect-nvswitches",
        ]


def build_node(board: FakeBoard, sockets: Path) -> FakeNode:
    root = board.root
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "cmdline").write_text(CMDLINE)
    (root / "proc" / "modules").write_text(MODULES)
    (root / "proc" / "meminfo").write_text(meminfo())
    (root / "proc" / "mounts").write_text(MOUNTS)
    pool = board.sysfs / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB"
    pool.mkdir(parents=True, exist_ok=True)
    (pool / "nr_hugepages").write_text(f"{HUGEPAGES_1G}\n")
    containerd = root / "etc" / "containerd"
    (containerd / "conf.d").mkdir(parents=True, exist_ok=True)
    (containerd / "config.toml").write_text(
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    )
    shutil.copy(CONTAINERD_DROP_IN, containerd / "conf.d" / "kata-qemu-nvidia-gpu.toml")
    (root / "var" / "run" / "cdi").mkdir(parents=True, exist_ok=True)
    # sockets live under a short directory (unix socket paths are limited to 107 bytes)
    kubelet = sockets / "kubelet"
    (kubelet / "pod-resources").mkdir(parents=True, exist_ok=True)
    paths = HostPaths(
        sysfs_root=board.sysfs,
        dev_root=board.dev,
        proc_root=root / "proc",
        etc_root=root / "etc",
        cdi_dir=root / "var" / "run" / "cdi",
        kubelet_dir=kubelet,
        libvirt_socket=sockets / "libvirt-sock",
        fabric_socket=sockets / "fabric.sock",
    )
    node = FakeNode(board=board, root=root, sockets=sockets, fabric=SimulatedFabric(), paths=paths)
    node.listen(kubelet / "device-plugins" / "kubelet.sock")
    node.listen(paths.libvirt_socket)
    return node


@pytest.fixture
def short_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # unix socket paths are limited to 107 bytes: a short pytest temp dir, not tmp_path.
    return tmp_path_factory.mktemp("dr")


def _node(
    board: FakeBoard, short_dir: Path, *, fabric: SimulatedFabric | None = None, layout: PlatformLayout | None = None
) -> Iterator[FakeNode]:
    """A node with its fabric service on its socket; ``fabric``/``layout`` replace the
    board's simulated Fabric Manager and the service's platform layout (validated)."""
    node = build_node(board, short_dir)
    if fabric is not None:
        node.fabric = fabric
    store = ActivationStore(board.root / "fabric-state").open()
    service = PartitionService(SimulatedFabricManager(node.fabric), store, layout=layout)
    if layout is not None:
        service.validate_layout()
    node.vm_state.update({"state": "running", "domain": "gpucaas-fabric", "restarts": 0})
    server = UnixServer(create_app(service, vm_state=lambda: dict(node.vm_state)), node.paths.fabric_socket)
    server.start()
    try:
        yield node
    finally:
        server.stop()
        store.close()
        for sock in node._listeners:
            sock.close()


@pytest.fixture
def node(hgx_board: FakeBoard, short_dir: Path) -> Iterator[FakeNode]:
    """A DGX-style HGX H100 node with every prerequisite right."""
    yield from _node(hgx_board, short_dir)


@pytest.fixture
def supermicro_node(supermicro_board: FakeBoard, short_dir: Path) -> Iterator[FakeNode]:
    """The same with the Supermicro IOMMU layout (NVSwitches + memory controller in one group)."""
    yield from _node(supermicro_board, short_dir)
