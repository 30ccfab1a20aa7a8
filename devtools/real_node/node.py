"""A real Kubernetes node on this machine: containerd 2.x, runc and the pinned kubelet.

containerd (built from its Go module by ``upstream/build.sh``) runs with its own root,
state and socket under the node's folder, the CRI plugin using Debian's ``runc`` for both
the default handler and the production RuntimeClass's ``kata-qemu-nvidia-gpu`` handler
(no VM boots on this machine: the container runs under runc, and an Event on each such pod
says so, :mod:`.notice`), CDI on (its spec folders are
the device plugin's and the DRA driver's), a bridge CNI network that stays on this
machine (Debian's ``containernetworking-plugins``; no masquerade, no route out) or, with
``NodeOptions.cilium_address``, Cilium in a network namespace of the node's own
(:mod:`.cilium`), and
registry host configuration that sends the upstream registries' names to the local ones
(:mod:`.registry`).

The kubelet registers its own Node (``kubeletVersion`` and ``containerRuntimeVersion`` are
real), with the cgroupfs driver under a cgroup root of its own (two nodes on one machine
do not share ``/kubepods``), ``failCgroupV1: false`` (this machine is cgroup v1), its
root directory under the node's folder (DRA drivers register at ``<root>/plugins_registry``,
the PodResources API is ``<root>/pod-resources/kubelet.sock``; device plugins register at
``<root>/device-plugins/kubelet.sock`` through the node's mount namespace, see
:meth:`RealNode._prepare`), its serving port chosen free,
authentication by client certificate from the cluster's CA and authorisation by webhook
(the API server's kubelet client is allowed; anybody else is asked about).
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.kubelet_dirs import KubeletDirs
from devtools.local_cluster.cluster import LocalCluster, free_port
from devtools.processes import ProcessFailed, Supervisor, http_ready, unix_socket_ready
from devtools.real_node import cilium
from devtools.real_node.images import PAUSE
from devtools.real_node.lazy_pull import LazyPull
from devtools.real_node.notice import RuntimeNotice
from devtools.waiting import wait_for

RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
#: the production RuntimeClass's handler, run by runc here
KATA_HANDLER = "kata-qemu-nvidia-gpu"
RUNC_SHIM = "io.containerd.runc.v2"
CONTAINERD_NAMESPACE = "k8s.io"
#: the cluster's DNS domain (the one every cluster has unless told otherwise)
CLUSTER_DOMAIN = "cluster.local"
#: where every kubelet serves device plugins, whatever its root directory (k8s.io/kubelet's deviceplugin constants)
SHARED_DEVICE_PLUGIN_DIR = KubeletDirs().device_plugins


@dataclass
class NodeOptions:
    name: str
    #: the node's pod network (a /24 per node keeps nodes on one machine apart); default: a free one
    pod_cidr: str = ""
    #: where the device plugin and the DRA driver write their CDI specs
    cdi_dirs: tuple[Path, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    #: upstream registry name -> the loopback address that serves it (plain HTTP)
    mirrors: dict[str, str] = field(default_factory=dict)
    max_pods: int = 110
    #: the node's address on the Cilium uplink (:mod:`.cilium`): Cilium is its network, in a
    #: network namespace of its own; empty: the plain bridge on this machine's namespace
    cilium_address: str = ""
    #: more paths of this machine that the node's mount namespace binds to folders of the node's
    #: own (target -> source): the host paths a DaemonSet of the node mounts
    binds: dict[str, Path] = field(default_factory=dict)
    #: address ranges the pods reach through the node's bridge gateway (the Service range, where
    #: something on this machine answers for the Services); none: the pods reach their network only
    routes: tuple[str, ...] = ()
    #: the cluster DNS's address, which the kubelet gives its pods as their nameserver (with the
    #: cluster domain ``cluster.local``); empty: none runs, pods get this machine's resolv.conf
    cluster_dns: str = ""
    #: images pulled lazily: containerd's snapshotter is the stargz snapshotter (:mod:`.lazy_pull`),
    #: which mounts eStargz layers and fetches their files as they are read
    lazy_pull: bool = False


class RealNode(Supervisor):
    """containerd + kubelet for one node of ``cluster``, under ``folder``."""

    def __init__(self, folder: Path, cluster: LocalCluster, options: NodeOptions) -> None:
        self.folder = folder.resolve()
        super().__init__(self.folder / "logs")
        self.cluster = cluster
        self.options = options
        self.kubelet_port = 0
        self.notice: RuntimeNotice | None = None
        #: containerd's and the kubelet's own command lines (launch puts them in the namespace)
        self._commands: dict[str, list[str]] = {}
        self.network: cilium.NodeNetwork | None = None

    # --- paths ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def containerd_socket(self) -> Path:
        return self.folder / "containerd" / "containerd.sock"

    @property
    def _image_service(self) -> Path:
        return self.lazy.image_service if self.options.lazy_pull else self.containerd_socket

    @property
    def lazy(self) -> LazyPull:
        return LazyPull(self.folder / "stargz", self.cluster.bin_dir)

    @property
    def kubelet(self) -> KubeletDirs:
        return kubelet_dirs(self.folder)

    @property
    def gateway(self) -> str:
        """The pod network's gateway, on the node's bridge: also the node's address (the kubelet
        refuses a loopback node IP, and this one never leaves the machine)."""
        return str(ipaddress.ip_network(self.options.pod_cidr)[1])

    @property
    def node_ip(self) -> str:
        """The kubelet's node IP: its ``eth0`` on the Cilium uplink, else the bridge's gateway."""
        return self.options.cilium_address or self.gateway

    @property
    def healthz_address(self) -> str:
        """Where the kubelet's healthz listens: where this machine reaches the node."""
        return self.options.cilium_address or "127.0.0.1"

    @property
    def bridge(self) -> str:
        return f"gpucaas{ipaddress.ip_network(self.options.pod_cidr).network_address.packed[2]}"

    @property
    def cgroup_root(self) -> str:
        """Named after the node's bridge as well as the node: two sandboxes on one machine both
        have a ``gpu-node-a``, and stopping one kills every process under its cgroup root."""
        if self.options.cilium_address:  # no bridge: the uplink's name (one Cilium sandbox per machine)
            return f"/{cilium.UPLINK}-{self.name}"
        return f"/{self.bridge}-{self.name}"

    def cgroup_dirs(self) -> list[Path]:
        """The node's cgroup root in every v1 hierarchy of this machine."""
        base = Path("/sys/fs/cgroup")
        return [h / self.cgroup_root.lstrip("/") for h in base.iterdir() if h.is_dir() and not h.is_symlink()]

    # --- start ------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> RealNode:
        """The node's daemons, each once the one before answers; a start that fails half-way
        takes down what it made (:meth:`stop`)."""
        try:
            self._prepare()
            self.start_all(timeout)
            pod_cidr = self._wait_registered(timeout)
            if self.network is not None:
                self._start_cilium(pod_cidr, timeout)
            self.notice = RuntimeNotice(self.cluster.admin_kubeconfig, self.name, KATA_HANDLER).start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            if self.notice is not None:
                self.notice.stop()
                self.notice = None
            super().stop()
            self.remove_pods()
        finally:
            if self.network is not None:
                self.network.down()
            elif self.options.pod_cidr:  # its bridge, once it has a pod network
                subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
            unmount_under(self.folder)

    def remove_pods(self) -> None:
        """What a stopped node leaves: its shims, its containers' processes (all in its cgroup
        root) and their cgroups (its bridge and mounts go in :meth:`stop`)."""
        address = str(self.containerd_socket)
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"-address" in cmdline and address.encode() in cmdline:
                    _kill(int(proc.name))
        roots = self.cgroup_dirs()
        for root in roots:  # the cgroups vanish as their processes die: read what is there
            for procs in _walk(root, "cgroup.procs"):
                for pid in _read(procs).split():
                    _kill(int(pid))
        for root in roots:
            for d in sorted(_walk(root, "*"), key=lambda p: len(p.parts), reverse=True):
                _rmdir(d)
            _rmdir(root)

    def _prepare(self) -> None:
        opts = self.options
        for d in (
            self.folder / "containerd",
            self.folder / "cni" / "net.d",
            self.kubelet.root,
            self.folder / "certs.d",
            self.kubelet.device_plugins,
        ):
            d.mkdir(parents=True, exist_ok=True)
        if not self.kubelet_port:
            self.kubelet_port = free_port()
            self._healthz_port = free_port()
        with pod_networks_chosen():  # another sandbox's node may be choosing one at once
            if not opts.pod_cidr:
                opts.pod_cidr = free_pod_cidr()
            self._make_cgroup_root()
            if opts.cilium_address:
                self.network = cilium.NodeNetwork(self.name, opts.cilium_address, opts.pod_cidr)
                self.network.up()
            else:
                self._make_bridge()
        self._write_registry_hosts()
        self._write_cni()
        cfg = self._write_containerd_config()
        b = self.cluster.bin_dir
        # The kubelet serves device plugins at a fixed path, /var/lib/kubelet/device-plugins/kubelet.sock
        # (k8s.io/kubelet's deviceplugin constants), whatever its --root-dir. containerd and the
        # kubelet therefore run in a mount namespace of the node's own, held by a sleeping process,
        # where that path is the node's folder: two nodes on one machine do not meet there, and
        # what the kubelet mounts for its pods stays inside (gone with the namespace). The pod
        # logs' fixed folders are the node's own there too: a kubelet removes the log folders of
        # pods it does not know, and would take its neighbour's pods' logs.
        binds = {
            str(SHARED_DEVICE_PLUGIN_DIR): self.kubelet.device_plugins,
            **{f"/var/log/{kind}": self.folder / "log" / kind for kind in ("pods", "containers")},
            **opts.binds,
        }
        for source in binds.values():
            source.mkdir(parents=True, exist_ok=True)
        mounts = " && ".join(
            f"mkdir -p {target} && mount --bind '{source}' {target}" for target, source in binds.items()
        )
        ready = self.folder / "namespace-ready"
        holder = ["unshare", "--mount", "--propagation", "slave", "sh", "-c"]
        if self.network is not None:  # made in the node's network namespace (and a sysfs of it)
            holder = ["nsenter", f"--net={self.network.path}", "--", *holder]
            holder.append(cilium.holder_script(self.folder, mounts, ready))
        else:
            holder.append(f"{mounts} && touch '{ready}' && exec sleep infinity")
        self.add("mount-namespace", holder, lambda: ready.exists())
        (self.folder / "namespace-ready").unlink(missing_ok=True)
        if opts.lazy_pull:  # in the node's mount namespace, where containerd sees its FUSE mounts
            self.add("stargz", *self.lazy.child(opts.mirrors, self.containerd_socket))
        self.add(
            "containerd",
            [b / "containerd", "--config", cfg],
            unix_socket_ready(self.containerd_socket),
            env={"PATH": f"{b}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"},
        )
        kubeconfig = self.cluster.kubeconfig_for(
            self.folder / f"kubelet-{self.name}.kubeconfig", f"system:node:{self.name}", groups=("system:nodes",)
        )
        if self.network is not None:
            kubeconfig = cilium.reachable_kubeconfig(kubeconfig, kubeconfig)
        kcfg = self._write_kubelet_config()
        args: list[object] = [
            b / "kubelet",
            "--config",
            kcfg,
            "--kubeconfig",
            kubeconfig,
            "--root-dir",
            self.kubelet.root,
            "--cert-dir",
            self.folder / "kubelet-pki",
            "--hostname-override",
            self.name,
            "--node-ip",
            self.node_ip,
            "--v",
            "1",
        ]
        if opts.labels:
            args += ["--node-labels", ",".join(f"{k}={v}" for k, v in sorted(opts.labels.items()))]
        self.add("kubelet", args, http_ready(f"http://{self.healthz_address}:{self._healthz_port}/healthz"))

    def launch(self, name: str) -> None:
        """containerd and the kubelet start inside the node's mount namespace (its holder's, as it is now)."""
        child = self.children[name]
        if name != "mount-namespace":
            holder = self.pid("mount-namespace")
            if holder is None:
                raise ProcessFailed(f"{self.name}: the node's mount namespace is gone; restart the node")
            command = self._commands.setdefault(name, child.args)
            spaces = [f"--mount=/proc/{holder}/ns/mnt"]
            if self.network is not None:
                spaces.append(f"--net=/proc/{holder}/ns/net")
            child.args = ["nsenter", *spaces, "--", *command]
        super().launch(name)

    def _make_cgroup_root(self) -> None:
        """The kubelet wants its cgroup root to exist in every v1 hierarchy (cpuset's filled from its parent)."""
        for target in self.cgroup_dirs():
            target.mkdir(exist_ok=True)
            if target.parent.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    if not (target / f).read_text().strip():
                        (target / f).write_text((target.parent / f).read_text())

    def _make_bridge(self) -> None:
        """The pod bridge with the gateway address, before any pod: the node's address lives on it."""
        ip = ["ip", "link", "show", self.bridge]
        if subprocess.run(ip, capture_output=True, check=False).returncode != 0:
            subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True, capture_output=True)
        prefix = ipaddress.ip_network(self.options.pod_cidr).prefixlen
        subprocess.run(
            ["ip", "addr", "replace", f"{self.gateway}/{prefix}", "dev", self.bridge], check=True, capture_output=True
        )
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True, capture_output=True)

    def _write_registry_hosts(self) -> None:
        root = self.folder / "certs.d"
        for name, address in self.options.mirrors.items():
            d = root / name
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts.toml").write_text(
                f'server = "http://{address}"\n\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n'
            )

    def _kubectl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        kubectl = [str(self.cluster.bin_dir / "kubectl"), "--kubeconfig", str(self.cluster.admin_kubeconfig)]
        return subprocess.run([*kubectl, *args], capture_output=True, text=True, check=check)

    def _wait_registered(self, timeout: float) -> str:
        """Wait for the kubelet to register the Node (a started node is one the cluster knows:
        what reads or patches it next would otherwise race the kubelet's first report); its
        ``spec.podCIDR``, empty until one is set."""

        def registered() -> subprocess.CompletedProcess[str] | None:
            read = self._kubectl("get", "node", self.name, "-o", "jsonpath={.spec.podCIDR}")
            return read if read.returncode == 0 else None

        return wait_for(registered, timeout, interval=0.5, what=f"the Node {self.name}").stdout.strip()

    def _start_cilium(self, current_cidr: str, timeout: float) -> None:
        """The node's Cilium agent, once the kubelet registered the Node: the Node's podCIDR
        first (the agent's IPAM hands out the pods' addresses from it; no controller-manager
        allocates node CIDRs here, and the kubelet's own ``podCIDR`` setting is not published)."""
        b = self.cluster.bin_dir
        cidr = {"spec": {"podCIDR": self.options.pod_cidr, "podCIDRs": [self.options.pod_cidr]}}
        if not current_cidr:
            self._kubectl("patch", "node", self.name, "--type", "merge", "-p", json.dumps(cidr), check=True)
        kubeconfig = cilium.reachable_kubeconfig(self.cluster.admin_kubeconfig, self.folder / "cilium.kubeconfig")
        self.add(
            "cilium-agent",
            cilium.agent_command(b, kubeconfig),
            lambda: cilium.agent_ready(b, self.folder),
            env={"K8S_NODE_NAME": self.name, "PATH": f"{cilium.LLVM_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )
        self.bring_up("cilium-agent", timeout)

    def _write_cni(self) -> None:
        if self.options.cilium_address:
            conf = cilium.cni_config()
            (self.folder / "cni" / "net.d" / "05-cilium.conflist").write_text(json.dumps(conf, indent=1))
            return
        conf = {
            "cniVersion": "1.0.0",
            "name": "gpucaas-pods",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.options.pod_cidr}]],
                        "routes": [{"dst": cidr} for cidr in self.options.routes],
                        "dataDir": str(self.folder / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (self.folder / "cni" / "net.d" / "10-gpucaas.conflist").write_text(json.dumps(conf, indent=1))

    def _write_containerd_config(self) -> Path:
        root = self.folder / "containerd"
        cdi = [str(d) for d in self.options.cdi_dirs] or [str(self.folder / "cdi")]
        config = f"""version = 3
root = "{root / "root"}"
state = "{root / "state"}"

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[plugins.'io.containerd.internal.v1.opt']
  path = "{root / "opt"}"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.runtime']
  # this machine's processes may not lower their OOM score (the kubelet asks -998 for sandboxes)
  restrict_oom_score_adj = true
  # pods' network namespaces under the node's folder, so a stopped node leaves none behind
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = {json.dumps(cdi)}
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "{RUNC_SHIM}"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        Root = "{root / "runc"}"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{KATA_HANDLER}]
      runtime_type = "{RUNC_SHIM}"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{KATA_HANDLER}.options]
        BinaryName = "{RUNC}"
        Root = "{root / "runc"}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = {json.dumps([CNI_BIN, *([str(self.cluster.bin_dir)] if self.options.cilium_address else [])])}
    conf_dir = "{self.folder / "cni" / "net.d"}"

{self.lazy.containerd_proxy() if self.options.lazy_pull else ""}
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "{"stargz" if self.options.lazy_pull else "overlayfs"}"
{self.lazy.containerd_images() if self.options.lazy_pull else ""}  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{self.folder / "certs.d"}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
        path = root / "config.toml"
        path.write_text(config)
        return path

    def _write_kubelet_config(self) -> Path:
        pki = self.cluster.pki
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": self.healthz_address,
            "healthzPort": self._healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca.cert)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            # with lazy pulls, image calls go through the snapshotter's CRI proxy (the pull's credentials)
            "imageServiceEndpoint": f"unix://{self._image_service}",
            "failSwapOn": False,
            "maxPods": self.options.max_pods,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "registerNode": True,
            "podCIDR": self.options.pod_cidr,
            "resolvConf": "/etc/resolv.conf",
            "localStorageCapacityIsolation": True,
            "fileCheckFrequency": "2s",
            "syncFrequency": "10s",
            "nodeStatusReportFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "shutdownGracePeriod": "0s",
            "protectKernelDefaults": False,
        }
        if self.options.cluster_dns:
            cfg |= {"clusterDNS": [self.options.cluster_dns], "clusterDomain": CLUSTER_DOMAIN}
        path = self.folder / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path


def kubelet_dirs(folder: Path) -> KubeletDirs:
    """The kubelet root of the real node in ``folder``."""
    return KubeletDirs(folder / "kubelet")


#: held while a node chooses its pod network and makes its bridge (:func:`free_pod_cidr` takes
#: the first network no interface has: two nodes choosing at once, in sandboxes side by side,
#: would both take it)
POD_NETWORKS_LOCK = Path("/run/lock/gpucaas-pod-networks.lock")


@contextmanager
def pod_networks_chosen() -> Iterator[None]:
    POD_NETWORKS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with POD_NETWORKS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def free_pod_cidr() -> str:
    """A ``10.88.N.0/24`` no interface of this machine has yet (each node's pod network its own)."""
    taken = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=False).stdout
    for n in range(0, 250):
        if f" 10.88.{n}.1/" not in taken:
            return f"10.88.{n}.0/24"
    raise RuntimeError("no free 10.88.N.0/24 pod network left on this machine")


def node_tools_missing() -> list[str]:
    """What this machine lacks to run a real node (Debian packages, or root)."""
    missing = [tool for tool in ("runc", "docker-registry", "skopeo", "htpasswd") if shutil.which(tool) is None]
    if not Path(CNI_BIN, "bridge").exists():
        missing.append("containernetworking-plugins")
    if not Path("/dev/fuse").exists():
        missing.append("/dev/fuse (the stargz snapshotter mounts lazily pulled layers with FUSE)")
    if os.geteuid() != 0:
        missing.append("root (containerd and the kubelet need it)")
    return missing


def unmount_under(folder: Path) -> None:
    """Unmount what the kubelet and containerd mounted under ``folder`` (deepest first): the
    kubelet bind-mounts its root directory onto itself, pods' volumes are tmpfs and binds,
    containers' root filesystems are overlays."""
    prefix = str(folder.resolve())
    mounts = [
        line.split()[1].encode().decode("unicode_escape") for line in Path("/proc/mounts").read_text().splitlines()
    ]
    for target in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _walk(root: Path, pattern: str) -> list[Path]:
    """``root.rglob(pattern)`` (directories only for ``*``), empty where the tree is gone or going."""
    try:
        return [p for p in root.rglob(pattern) if pattern != "*" or p.is_dir()]
    except OSError:
        return []


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
