"""The sandbox's second stage, the nodes: the local registries, then per GPU node a fake HGX
H100 board (a sysfs tree with real ``/dev/vfio`` character devices) and a real node
(:mod:`devtools.real_node`: containerd, runc and the pinned kubelet; the Kata handler runs
runc, no VM boots here). The gpucaas daemons of each node come with the product
(:mod:`.product`). On a given cluster there are no nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.kubelet_dirs import KubeletDirs
from core.kueue import GPU_COUNT_LABEL
from devtools.fake_sysfs import build_hgx_h100, load_board
from devtools.local_cluster import KUBE_VERSION, bin_dir as kube_bin_dir
from devtools.real_node import cilium
from devtools.real_node.devices import make_char_devices
from devtools.real_node.node import NodeOptions, RealNode, kubelet_dirs, node_tools_missing
from devtools.real_node.registry import Registries
from devtools.sandbox.service_network import DNS_IP

if TYPE_CHECKING:
    from devtools.sandbox.runner import Plan, Sandbox


def node_names(count: int) -> tuple[str, ...]:
    """The sandbox's GPU nodes' names: ``gpu-node-a``, ``gpu-node-b``, ..."""
    return tuple(f"gpu-node-{chr(ord('a') + i)}" for i in range(count))


#: as many as ``gpucaas sandbox``'s ``real_nodes`` setting gives by default (a test holds them equal)
DEFAULT_NODES = node_names(2)
#: the labels of the sandbox's GPU nodes: the one the placement and the DaemonSets select on, the
#: instance type (Kueue's ResourceFlavor selects it), and what NVIDIA GPU Feature Discovery gives
#: an HGX H100 SXM node: its product name (usage records read it) and its GPU count (the tenancy
#: controller sums it for the Kueue cohort's own quota)
GPU_NODE_LABELS = {
    "gpucaas.dev/gpu-node": "true",
    "node.kubernetes.io/instance-type": "hgx-h100-8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    GPU_COUNT_LABEL: "8",
}


#: the node's folder bound at ``/run/gpucaas`` in its mount namespace (``--install helm``)
RUN_GPUCAAS = "run-gpucaas"


@dataclass
class NodePaths:
    """One GPU node's folder, ``<state>/nodes/<name>``: its board, its real node's kubelet, and
    the sockets and state of its gpucaas daemons."""

    name: str
    root: Path
    #: the gpucaas daemons run as the chart's DaemonSet pods (``--install helm``), whose
    #: ``/run/gpucaas`` is the node's :data:`RUN_GPUCAAS` folder (:func:`node_binds`)
    chart_installed: bool = False

    @property
    def board(self) -> Path:
        return self.root / "board"

    @property
    def sysfs(self) -> Path:
        return self.board / "sys"

    @property
    def dev(self) -> Path:
        return self.board / "dev"

    @property
    def kubelet(self) -> KubeletDirs:
        """The node's kubelet: device plugins, PodResources and the DRA driver meet it there."""
        return kubelet_dirs(self.root)

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def fabric_socket(self) -> Path:
        """The fabric service's socket as this machine reaches it (caasctl's ``fabric_socket``):
        the chart's ``fabricSocket`` (``/run/gpucaas/fabric.sock``) in the node's mount namespace
        when the chart runs the service, else the socket the service's process serves."""
        if self.chart_installed:
            return self.root / RUN_GPUCAAS / "fabric.sock"
        return self.root / "fabric.sock"

    @property
    def fabric_state_dir(self) -> Path:
        return self.root / "fabric-state"

    @property
    def dra_state_dir(self) -> Path:
        return self.root / "dra-state"


#: where each node's mount namespace binds its board with ``--install helm`` (the gpuNodes paths
#: of deploy/helm/values-sandbox.yaml)
BOARD_PATH = "/var/lib/gpucaas-sandbox/board"


def node_binds(node: NodePaths) -> dict[str, Path]:
    """The host paths the chart's DaemonSets mount (``--install helm``), each bound in ``node``'s
    mount namespace to a folder of the node's own: the board at :data:`BOARD_PATH`, the
    kubelet's PodResources socket and its DRA plugin folders (registration, endpoints), the CDI
    specs containerd reads, the fabric socket's and state's folders, and an empty libvirt socket
    folder (libvirt's test driver needs no libvirtd)."""
    return {
        BOARD_PATH: node.board,
        "/var/lib/kubelet/pod-resources": node.kubelet.pod_resources_socket.parent,
        "/var/lib/kubelet/plugins": node.kubelet.plugins,
        "/var/lib/kubelet/plugins_registry": node.kubelet.plugins_registry,
        "/var/run/cdi": node.cdi_dir,
        "/run/gpucaas": node.root / RUN_GPUCAAS,
        "/var/lib/gpucaas": node.root / "var-lib-gpucaas",
        "/var/run/libvirt": node.root / "libvirt",
    }


def check_node_tools(plan: Plan) -> None:
    """Refuses, before anything starts, a sandbox this machine cannot run (``OSError``)."""
    missing = node_tools_missing() if plan.own_cluster else []
    if plan.cilium:
        if not plan.own_cluster:
            raise OSError("the cilium network is the sandbox's own nodes' network: it needs no --kubeconfig")
        missing += cilium.missing(kube_bin_dir())
    if missing:
        raise OSError("a GPU node needs " + ", ".join(missing) + " (make install adds the packages)")


def start_nodes(sandbox: Sandbox, plan: Plan) -> None:
    """The registries and the real nodes with their boards (own cluster only)."""
    if sandbox.cluster is None:
        return
    say = plan.say
    say(
        "starting the local registries (public images built from busybox-static; a private one "
        "that asks for credentials) and pushing the images, each with an eStargz copy (tag -esgz)"
    )
    # each part is the sandbox's before it starts: stopping the sandbox stops a part that failed half-way
    registries = sandbox.registries = Registries(
        sandbox.state_dir / "registries",
        bind=cilium.HOST_ADDRESS if plan.cilium else "127.0.0.1",
        estargz_from=sandbox.cluster.bin_dir,
    )
    registries.start()
    services = sandbox.service_range
    for index, name in enumerate(plan.nodes):
        node = NodePaths(name, sandbox.state_dir / "nodes" / name, chart_installed=plan.helm)
        sandbox.nodes.append(node)
        if not (node.board / "board.json").exists():
            build_hgx_h100(node.board)
        load_board(node.board)
        make_char_devices(node.dev)
        for d in (
            node.kubelet.device_plugins,
            node.cdi_dir,
            node.fabric_state_dir,
            node.kubelet.pod_resources_socket.parent,
        ):
            d.mkdir(parents=True, exist_ok=True)
        address = cilium.node_address(index) if plan.cilium else ""
        say(
            f"[{name}] starting a real node: containerd, runc and kubelet {KUBE_VERSION} "
            "(the kata-qemu-nvidia-gpu handler runs runc here: no VM boots on this machine)"
            + (f"; its network: Cilium, in a namespace of its own at {address}" if address else "")
            + ("; images pulled lazily by the stargz snapshotter" if plan.lazy_pull(name) else "")
        )
        real = sandbox.real_nodes[name] = RealNode(
            node.root,
            sandbox.cluster,
            NodeOptions(
                name,
                cdi_dirs=(node.cdi_dir,),
                labels=GPU_NODE_LABELS,
                mirrors={**registries.mirrors(), **plan.mirrors},
                pod_cidr=cilium.pod_cidr(index) if plan.cilium else "",
                cilium_address=address,
                binds=node_binds(node) if plan.helm else {},
                # the chart's pods reach Services (kube-proxy, service_network) and the cluster DNS,
                # answer the connections kube-proxy sends them (from its namespace's end of the veth
                # pair) and reach this machine at its end, whichever node they are on
                routes=(services.cidr, services.link) if services else (),
                cluster_dns=services.moved(DNS_IP) if services else "",
                lazy_pull=plan.lazy_pull(name),
            ),
        )
        real.start()
