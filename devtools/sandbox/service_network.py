"""What a real cluster runs for its Services, run for the sandbox's real nodes with ``--install
helm``: kube-proxy, which sends each Service's address to its endpoints, and the cluster DNS,
CoreDNS, which answers ``<service>.<namespace>.svc.cluster.local``. Both are the pinned
upstream binaries (``upstream/build.sh``), supervised processes on this machine.

kube-proxy: one for every node. Each node's pods sit on a bridge in this machine's network
namespace (:mod:`devtools.real_node`), and this machine routes the sandbox's Service range into
the network namespace kube-proxy runs in (:mod:`.service_range`: its rules are one nftables
table of a fixed name, ``ip kube-proxy``, so each sandbox's kube-proxy has a namespace of its
own and sandboxes run side by side), so the rules one kube-proxy writes there serve them all. It
runs as the first node (its Node gives it the node IP), as ``system:kube-proxy`` (the bootstrap
policy binds ``system:node-proxier`` to it), and reaches kube-apiserver through a forwarder on
this machine's end of the namespace's veth pair. ``masqueradeAll``: every connection leaves the
namespace with the namespace's address as its source, so its reply comes back through the rules
that undo the Service's address. Removing the namespace when the sandbox stops removes the rules.

CoreDNS: its ``kubernetes`` plugin watches the sandbox's kube-apiserver as ``system:coredns``
(the ClusterRole kubeadm gives it); it listens on every node bridge's gateway on one port, the
selector-less Service ``kube-system/kube-dns`` at :data:`DNS_IP` (moved to the sandbox's range)
has an EndpointSlice naming those (:mod:`.host_services`), and each kubelet gives its pods that
nameserver (``clusterDNS``, ``clusterDomain``). Other names go to this machine's resolvers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools.local_cluster.objects import create_all, replace_all
from devtools.ports import free_port
from devtools.processes import Supervisor, http_ready
from devtools.real_node.node import CLUSTER_DOMAIN
from devtools.sandbox.host_services import Forwarder, endpoint_slice
from devtools.sandbox.service_range import ServiceRange, in_namespace

if TYPE_CHECKING:
    from devtools.local_cluster import LocalCluster
    from devtools.sandbox.runner import Plan, Sandbox

#: the pinned CoreDNS (upstream/coredns/go.mod)
COREDNS_VERSION = "v1.15.0"
#: the cluster DNS Service's address in the first Service range (kubeadm's choice: the tenth of it)
DNS_IP = "10.96.0.10"
COREDNS_USER = "system:coredns"


def dns_service(address: str) -> dict[str, Any]:
    """The cluster DNS Service at ``address``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
        # no selector: its backend is CoreDNS on this machine (the EndpointSlice this module writes)
        "spec": {
            "clusterIP": address,
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        },
    }


WATCH = ["list", "watch"]
COREDNS_RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": COREDNS_USER},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": WATCH},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": WATCH},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": COREDNS_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
    },
]


class ServiceNetwork(Supervisor):
    """kube-proxy and CoreDNS for ``cluster``, whose Service range is ``services`` and whose node
    bridges' gateways are ``gateways`` (the first node named ``node``); files under ``folder``,
    logs in ``logs_dir``."""

    def __init__(
        self,
        cluster: LocalCluster,
        services: ServiceRange,
        folder: Path,
        logs_dir: Path,
        node: str,
        gateways: list[str],
    ) -> None:
        super().__init__(logs_dir)
        self.cluster = cluster
        self.services = services
        self.folder = folder.resolve()
        self.node = node
        self.gateways = gateways
        self.apiserver_forwarder: Forwarder | None = None

    def start(self) -> ServiceNetwork:
        """kube-proxy (its rules in place: it answers ``/healthz`` once synced), then CoreDNS
        (ready once its view of the cluster is synced) and its Service; a start that fails
        half-way takes down what it made (:meth:`stop`)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._start_kube_proxy()
            self._start_coredns()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        super().stop()
        if self.apiserver_forwarder is not None:
            self.apiserver_forwarder.stop()
            self.apiserver_forwarder = None

    def _start_kube_proxy(self) -> None:
        services = self.services
        healthz, metrics = free_port(), free_port()
        if self.apiserver_forwarder is None:
            self.apiserver_forwarder = Forwarder((services.host_address, free_port()), self.cluster.apiserver_port)
            self.apiserver_forwarder.start()
        host, port = self.apiserver_forwarder.server.getsockname()[:2]
        kubeconfig = self.cluster.kubeconfig_for(self.folder / "kube-proxy.kubeconfig", "system:kube-proxy")
        doc = yaml.safe_load(kubeconfig.read_text())
        # the forwarder's address is not one kube-apiserver's certificate names: check it as "kubernetes"
        doc["clusters"][0]["cluster"].update({"server": f"https://{host}:{port}", "tls-server-name": "kubernetes"})
        kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.node,
            "mode": "nftables",
            "nftables": {"masqueradeAll": True},
            "healthzBindAddress": f"{services.proxy_address}:{healthz}",
            "metricsBindAddress": f"{services.proxy_address}:{metrics}",
            # the namespace's conntrack settings stay as they are
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        path = self.folder / "kube-proxy-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = [*in_namespace(services), self.cluster.bin_dir / "kube-proxy", "--config", path, "--v", "1"]
        self.add("kube-proxy", command, http_ready(f"http://{services.proxy_address}:{healthz}/healthz"))
        self.bring_up("kube-proxy")

    def _start_coredns(self) -> None:
        kubeconfig = self.cluster.kubeconfig_for(self.folder / "coredns.kubeconfig", COREDNS_USER)
        create_all(self.cluster.admin_kubeconfig, [*COREDNS_RBAC, dns_service(self.services.moved(DNS_IP))])
        port, ready = free_port(), free_port()
        corefile = self.folder / "Corefile"
        corefile.write_text(coredns_config(port, ready, self.gateways, kubeconfig))
        self.add(
            "coredns",
            [self.cluster.bin_dir / "coredns", "-conf", corefile],
            http_ready(f"http://127.0.0.1:{ready}/ready"),
        )
        self.bring_up("coredns")
        ports = {"dns": ("UDP", port), "dns-tcp": ("TCP", port)}
        replace_all(self.cluster.admin_kubeconfig, [endpoint_slice("kube-system", "kube-dns", self.gateways, ports)])


def coredns_config(port: int, ready_port: int, addresses: list[str], kubeconfig: Path) -> str:
    """The Corefile: kubeadm's on ``addresses``, without its metrics, health, loop detection and reload."""
    return f"""\
.:{port} {{
    bind {" ".join(addresses)}
    errors
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    forward . /etc/resolv.conf
    cache 30
}}
"""


def start_service_network(sandbox: Sandbox, plan: Plan) -> None:
    """kube-proxy and CoreDNS for the sandbox's real nodes (``--install helm``), once the nodes run."""
    assert sandbox.cluster is not None and sandbox.real_nodes and sandbox.service_range is not None
    nodes = list(sandbox.real_nodes.values())
    services = sandbox.service_range
    plan.say(
        f"starting kube-proxy (nftables, in the network namespace {services.namespace}, one for every node "
        f"bridge) and CoreDNS {COREDNS_VERSION} (the cluster DNS, {services.moved(DNS_IP)}; pods resolve "
        f"<service>.<namespace>.svc.{CLUSTER_DOMAIN})"
    )
    network = sandbox.service_network = ServiceNetwork(
        sandbox.cluster,
        services,
        sandbox.state_dir / "service-network",
        sandbox.supervisor.logs_dir,
        nodes[0].name,
        [node.gateway for node in nodes],
    )
    network.start()
