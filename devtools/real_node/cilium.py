"""Cilium as the real nodes' network (the sandbox's ``--network cilium``; opt-in).

The plain bridge network connects every pod of the machine and enforces nothing: the
tenancy controller's CiliumNetworkPolicies are objects only. With Cilium, each real node
gets a network namespace of its own, as if it were a server of its own:

* the machine keeps a bridge, :data:`UPLINK` with :data:`HOST_ADDRESS`, playing the
  datacenter network; each node's ``eth0`` (:func:`node_address`) is a veth on it, and the
  node's kubelet, containerd and Cilium agent run in that namespace (the node's pods' veths
  live there, as on a real server);
* the control plane, the registries and the ingress controller stay on the machine: the
  API server and the registries listen on every address so the nodes reach them at
  :data:`HOST_ADDRESS` (the nodes' kubeconfigs name the API server's loopback certificate
  name, ``localhost``, as their TLS server name); the machine reaches the pods by a route to
  each node's pod network through that node's address;
* Cilium (built from its Go module by ``make upstream-cilium``; the datapath compiled by
  Debian's clang 19) runs in native routing mode (the nodes share the bridge:
  ``--auto-direct-node-routes``), without kube-proxy replacement, with the L7 proxy on (the
  tenancy policy's DNS rule needs it). Its operator runs once, on the machine.

What a namespace does not contain: the agent sets three system-wide sysctls
(``kernel.unprivileged_bpf_disabled=1``, one-way until a reboot, ``kernel.timer_migration=0``,
``net.core.bpf_jit_enable=1``); docs/cilium-feasibility.md says more.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import yaml

from devtools.local_cluster.cluster import LocalCluster
from devtools.local_cluster.objects import established
from devtools.processes import Supervisor

#: the machine's bridge that the nodes' ``eth0`` hang on (one Cilium sandbox per machine)
UPLINK = "gpucaas-cilium"
UPLINK_NETWORK = ipaddress.ip_network("10.89.0.0/24")
#: the machine's own address on it: where the nodes reach the API server and the registries
HOST_ADDRESS = str(UPLINK_NETWORK[1])
#: the pods' addresses (a /24 per node, :func:`pod_cidr`): Cilium's native routing CIDR (apart
#: from the bridge network's 10.88.N.0/24, so that a bridge sandbox beside it does not clash)
POD_NETWORK = "10.90.0.0/16"
AGENT = "cilium-agent"
OPERATOR = "cilium-operator-generic"
DBG = "cilium-dbg"
CNI = "cilium-cni"
BINARIES = (AGENT, OPERATOR, DBG, CNI)
#: clang and llc 19 (Cilium 1.20 needs LLVM >= 18; Debian's default clang is 14)
LLVM_BIN = Path("/usr/lib/llvm-19/bin")
#: the API server's certificate names loopback; the nodes dial HOST_ADDRESS and verify this name
API_SERVER_NAME = "localhost"


def node_address(index: int) -> str:
    """The ``index``-th node's address on the uplink (10.89.0.10, .11, ...)."""
    return str(UPLINK_NETWORK[10 + index])


def pod_cidr(index: int) -> str:
    """The ``index``-th node's pod network."""
    return str(list(ipaddress.ip_network(POD_NETWORK).subnets(new_prefix=24))[index])


def missing(bin_dir: Path) -> list[str]:
    """What this machine lacks to run Cilium (the binaries, clang 19, root)."""
    out = [f"{b} (make upstream-cilium)" for b in BINARIES if not (bin_dir / b).exists()]
    if not (bin_dir / "cilium-lib" / "bpf").is_dir():
        out.append("cilium-lib/bpf (make upstream-cilium)")
    if not (LLVM_BIN / "clang").exists() or not (LLVM_BIN / "llc").exists():
        out.append("clang-19 and llvm-19 (Debian packages)")
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        out.append("util-linux (nsenter, unshare)")
    return out


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


#: ``kernel.timer_migration`` as it was before the first agent lowered it to 0 (put back by
#: :func:`uplink_down`; kept across a sandbox that died, so the first value is the one restored)
TIMER_MIGRATION = Path("/proc/sys/kernel/timer_migration")
SAVED_TIMER_MIGRATION = Path("/run/gpucaas-cilium-timer_migration")


def uplink_up() -> None:
    """The uplink bridge with the machine's address (kept if it is there)."""
    if TIMER_MIGRATION.exists() and not SAVED_TIMER_MIGRATION.exists():
        SAVED_TIMER_MIGRATION.write_text(TIMER_MIGRATION.read_text())
    if _ip("link", "show", UPLINK, check=False).returncode != 0:
        _ip("link", "add", UPLINK, "type", "bridge")
    _ip("addr", "replace", f"{HOST_ADDRESS}/{UPLINK_NETWORK.prefixlen}", "dev", UPLINK)
    _ip("link", "set", UPLINK, "up")


def uplink_down() -> None:
    """The uplink goes, and the one system-wide sysctl of the agent's that can be put back is."""
    _ip("link", "del", UPLINK, check=False)
    if SAVED_TIMER_MIGRATION.exists():
        try:
            TIMER_MIGRATION.write_text(SAVED_TIMER_MIGRATION.read_text())
        except OSError:  # not writable here: docs/cilium.md says how to put it back
            return
        SAVED_TIMER_MIGRATION.unlink()


def reachable_kubeconfig(source: Path, target: Path) -> Path:
    """``source`` (a kubeconfig for the API server's loopback address) as a node's namespace
    reaches it: at :data:`HOST_ADDRESS`, verifying the certificate's loopback name."""
    doc = yaml.safe_load(source.read_text())
    for entry in doc["clusters"]:
        cluster = entry["cluster"]
        cluster["server"] = cluster["server"].replace("127.0.0.1", HOST_ADDRESS)
        cluster["tls-server-name"] = API_SERVER_NAME
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    target.chmod(0o600)
    return target


class NodeNetwork:
    """One node's network namespace: ``eth0`` on the uplink at ``address``, a default route
    to the machine, and the machine's route to the node's pods."""

    def __init__(self, node: str, address: str, pod_cidr: str) -> None:
        self.namespace = f"gpucaas-{node}"
        self.address = address
        self.pod_cidr = pod_cidr
        # a host-side interface name (15 bytes at most), unique per address
        self.host_veth = f"gcnode{ipaddress.ip_address(address).packed[3]}"

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.namespace

    def up(self) -> None:
        self.down()
        _ip("netns", "add", self.namespace)
        _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", "eth0", "netns", self.namespace)
        _ip("link", "set", self.host_veth, "master", UPLINK, "up")
        n = ("-n", self.namespace)
        _ip(*n, "link", "set", "lo", "up")
        _ip(*n, "addr", "add", f"{self.address}/{UPLINK_NETWORK.prefixlen}", "dev", "eth0")
        _ip(*n, "link", "set", "eth0", "up")
        _ip(*n, "route", "add", "default", "via", HOST_ADDRESS)
        _ip("route", "replace", self.pod_cidr, "via", self.address)

    def down(self) -> None:
        _ip("route", "del", self.pod_cidr, check=False)
        _ip("netns", "del", self.namespace, check=False)  # its eth0 goes, and the host side with it
        _ip("link", "del", self.host_veth, check=False)


def holder_script(folder: Path, binds: str, ready: Path) -> str:
    """The node's mount namespace, made inside its network namespace: a sysfs of the namespace
    (Cilium reads its devices there) with the machine's cgroup hierarchies bound back under it
    (the kubelet and runc need them), a bpffs of its own for the agent's pinned maps, and the
    agent's run directory in the node's folder (``cilium-cni`` finds the agent's socket there)."""
    cgroups = folder / "host-cgroup"
    run = folder / "cilium-run"
    return " && ".join(
        [
            f"mkdir -p '{cgroups}' '{run}'",
            f"mount --rbind /sys/fs/cgroup '{cgroups}'",
            "mount -t sysfs sysfs /sys",
            f"mount --rbind '{cgroups}' /sys/fs/cgroup",
            f"umount -l '{cgroups}'",
            "mount -t bpf bpf /sys/fs/bpf",
            f"mkdir -p /var/run/cilium && mount --bind '{run}' /var/run/cilium",
            binds,
            f"touch '{ready}'",
            "exec sleep infinity",
        ]
    )


def agent_command(bin_dir: Path, kubeconfig: Path) -> list[object]:
    """The agent's flags (docs/cilium-feasibility.md): native routing on the uplink, the
    Kubernetes IPAM (the Node's podCIDR), policy enforced by default rules, the L7 proxy on."""
    return [
        bin_dir / AGENT,
        f"--k8s-kubeconfig-path={kubeconfig}",
        f"--lib-dir={bin_dir / 'cilium-lib'}",
        "--devices=eth0",
        "--routing-mode=native",
        f"--ipv4-native-routing-cidr={POD_NETWORK}",
        "--auto-direct-node-routes=true",
        "--ipam=kubernetes",
        "--enable-ipv4=true",
        "--enable-ipv6=false",
        "--kube-proxy-replacement=false",
        "--bpf-lb-sock=false",
        "--enable-l7-proxy=true",
        "--enable-hubble=false",
        "--enable-ipv4-masquerade=false",
        "--enable-health-checking=false",
        "--enable-endpoint-health-checking=false",
        "--enable-policy=default",
        "--cni-exclusive=false",
        "--cluster-name=default",
        "--cluster-id=0",
    ]


def agent_ready(bin_dir: Path, folder: Path) -> bool:
    """``cilium-dbg status --brief`` through the agent's socket in the node's folder."""
    sock = folder / "cilium-run" / "cilium.sock"
    if not sock.exists():
        return False
    done = subprocess.run(
        [bin_dir / DBG, "-H", f"unix://{sock}", "status", "--brief"], capture_output=True, check=False, timeout=30
    )
    return done.returncode == 0


def cni_config() -> dict[str, object]:
    return {"cniVersion": "0.3.1", "name": "cilium", "plugins": [{"type": CNI, "enable-debug": False}]}


#: the CRD the agents wait for, registered by the operator
ENDPOINTS_CRD = "ciliumendpoints.cilium.io"


class Operator(Supervisor):
    """Cilium's generic operator on the machine: registers Cilium's CRDs, collects identities;
    ready once the API server serves CiliumEndpoints."""

    def __init__(self, folder: Path, cluster: LocalCluster) -> None:
        super().__init__(folder / "logs")
        self.cluster = cluster
        self.add(
            "cilium-operator",
            [
                cluster.bin_dir / OPERATOR,
                f"--k8s-kubeconfig-path={cluster.admin_kubeconfig}",
                "--ipam=kubernetes",
                "--cluster-name=default",
                "--enable-lb-ipam=false",
                "--enable-metrics=false",
            ],
            self._crds_served,
        )

    def _crds_served(self) -> bool:
        try:
            crd = self.cluster.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{ENDPOINTS_CRD}")
        except OSError:  # not registered yet (404), or the API server busy
            return False
        return established(crd)

    def start(self, timeout: float = 120.0) -> Operator:
        self.start_all(timeout)
        return self
