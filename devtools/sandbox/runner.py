"""`gpucaas sandbox`: the whole control plane and two GPU nodes (fake HGX H100 boards) on one machine.

:func:`start` brings the sandbox up in four stages, each waiting until what it started answers:

  1. the cluster (:mod:`.cluster`): a Kubernetes control plane from the pinned upstream binaries
     (etcd, kube-apiserver with Node,RBAC authorisation, NodeRestriction, Pod Security and an
     audit log, kube-controller-manager), the objects a real cluster would already have (CRDs,
     Cilium's policy CRD), the chart's cluster side rendered by the real Helm engine
     (ServiceAccounts, RBAC, RuntimeClass, ConfigMaps) and one kubeconfig per gpucaas process
     (:mod:`.identities`): no gpucaas process runs as the admin; with ``queueing`` ``kueue``,
     Kueue's manager and its webhooks (:mod:`.queueing`);
  2. the nodes (:mod:`.nodes`): the local registries, then per node a fake sysfs board with real
     ``/dev/vfio`` character devices and a real node (:mod:`devtools.real_node`: containerd, runc
     and the pinned kubelet as ``system:node:<name>``; the Kata handler runs runc, no VM boots here);
  3. the product (:mod:`.product`), the gpucaas services: the tenancy and lease controller (Kopf),
     per node the fabric service (Fabric Manager simulator, and the service VM under libvirt's test
     driver) and the device plugin, which registers with the node's kubelet over gRPC; the
     scheduler extender and kube-scheduler configured with the chart's extender configuration
     (``deploy/scheduler/``); the API over HTTPS;
  4. the tenants' view (:mod:`.tenant_view`): the ingress controller for containers' endpoints,
     the demo tenancy and its token, and the files a tenant or the admin reads.

In the ``dra`` allocation mode each node runs the DRA driver instead of the device plugin
(registered with the kubelet's plugin watcher), the chart's DeviceClasses are created,
kube-controller-manager's resourceclaim controller makes the pods' claims, and
kube-scheduler's DynamicResources plugin allocates them (the extender only scores).
With ``queueing`` ``kueue`` the controller and the API queue each container's pod by Kueue.
With ``--kubeconfig`` a real cluster is used and only the control-plane parts of the product run.
With ``install`` ``helm`` the third stage installs the product's chart by docs/deploy.md's steps
(:mod:`.chart_install`); with ``none`` it prepares the cluster for them and stops there: the
caller runs the steps, then :func:`open_installed` opens the tenants' view.

A stage that fails leaves what it started recorded on the :class:`Sandbox`, so that
:meth:`Sandbox.stop` takes down whatever runs, in one order, whichever stage failed.
"""

from __future__ import annotations

import json
import logging
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.kueue import Kueue
from devtools.local_cluster import LocalCluster
from devtools.processes import Revival, Supervisor
from devtools.real_node import cilium
from devtools.real_node.node import RealNode
from devtools.real_node.registry import Registries
from devtools.sandbox import hostpath_volumes, identities
from devtools.sandbox.chart_install import ChartRelease, install_chart, open_release, prepare_chart
from devtools.sandbox.cluster import start_cluster
from devtools.sandbox.host_services import Forwarder, HostServices
from devtools.sandbox.ingress import Ingress
from devtools.sandbox.nodes import DEFAULT_NODES, NodePaths, check_node_tools, start_nodes
from devtools.sandbox.product import start_product
from devtools.sandbox.queueing import check_kueue_built, check_queueing, start_kueue
from devtools.sandbox.service_network import ServiceNetwork, start_service_network
from devtools.sandbox.service_range import ServiceRange, release as release_range
from devtools.sandbox.tenant_view import KUBECONFIG, credentials, open_tenant_view
from devtools.sandbox.tls import TLSFiles

log = logging.getLogger(__name__)

NETWORKS = ("bridge", "cilium")
INSTALLS = ("processes", "helm", "none")


@dataclass(frozen=True)
class Plan:
    """What :func:`start` was asked for, as the stages read it."""

    nodes: tuple[str, ...]
    api_port: int
    #: a cluster to use instead of the sandbox's own (then no nodes run)
    kubeconfig: Path | None
    chart_objects: list[dict[str, Any]] | None
    allocation_mode: str
    database_url: str | None
    api_replicas: int
    compaction_interval: str | None
    network: str
    say: Callable[[str], None]
    #: ``processes`` (the gpucaas services on this machine), ``helm`` (the chart installed,
    #: :mod:`.chart_install`) or ``none`` (the cluster prepared for the chart, which the caller installs)
    install: str = "processes"
    #: ``none`` (kube-scheduler's queue) or ``kueue`` (Kueue admits the containers' pods, :mod:`.queueing`)
    queueing: str = "none"
    #: what ``helm`` installs (this work tree's chart and image when None)
    release: ChartRelease | None = None
    #: more registry names the nodes' containerd maps to an address (name -> host:port, plain HTTP)
    mirrors: dict[str, str] = field(default_factory=dict)
    #: the nodes that pull images lazily (the stargz snapshotter, :mod:`devtools.real_node.lazy_pull`); None: all
    lazy_pull_nodes: tuple[str, ...] | None = None

    def lazy_pull(self, node: str) -> bool:
        return self.lazy_pull_nodes is None or node in self.lazy_pull_nodes

    @property
    def own_cluster(self) -> bool:
        return self.kubeconfig is None

    @property
    def cilium(self) -> bool:
        return self.network == "cilium"

    @property
    def helm(self) -> bool:
        """Whether the product comes from the chart, installed by the sandbox or by the caller."""
        return self.install in ("helm", "none")


@dataclass
class Sandbox:
    """What a running sandbox offers: URLs, tokens, files, and the supervisor of its gpucaas services."""

    state_dir: Path
    supervisor: Supervisor
    api_url: str
    #: the admin's kubeconfig: the given cluster's, or ``<state_dir>/kubeconfig``
    kubeconfig: Path
    tls: TLSFiles
    admin_token: str
    tenant_token: str | None = None
    nodes: list[NodePaths] = field(default_factory=list)
    #: every API replica's URL (``api_url`` first); the supervisor names them ``api``, ``api-2``, ...
    api_urls: list[str] = field(default_factory=list)
    extender_url: str | None = None
    identities: dict[str, identities.Identity] = field(default_factory=dict)
    audit_log: Path | None = None
    allocation_mode: str = "device-plugin"
    cluster: LocalCluster | None = None
    #: the nodes that run containers for real (containerd + runc + the kubelet), by name
    real_nodes: dict[str, RealNode] = field(default_factory=dict)
    registries: Registries | None = None
    #: hands the HostPath provisioner's volume directories to the tenant UID (own cluster only)
    volume_ownership: hostpath_volumes.VolumeOwnership | None = None
    #: Traefik serving the containers' endpoints (own cluster only; ``ingress.json``)
    ingress: Ingress | None = None
    #: the real nodes' network: ``bridge`` (nothing enforced) or ``cilium`` (:mod:`devtools.real_node.cilium`)
    network: str = "bridge"
    #: Cilium's operator (the ``cilium`` network only)
    cilium_operator: cilium.Operator | None = None
    #: kube-apiserver and PostgreSQL as the chart's pods reach them (``--install helm`` only)
    host_services: HostServices | None = None
    #: kube-proxy and the cluster DNS (``--install helm`` only)
    service_network: ServiceNetwork | None = None
    #: the cluster's Service range, routed into kube-proxy's network namespace (``--install helm`` only)
    service_range: ServiceRange | None = None
    #: the API's Service forwarded to the API's URL on this machine (``--install helm`` only)
    api_forwarder: Forwarder | None = None
    #: the chart's release and the image its pods run, in words (``--install helm`` only)
    installed: str | None = None
    #: Kueue's manager (``queueing`` ``kueue`` only)
    kueue: Kueue | None = None
    #: what the chart installs, its image built (``--install helm`` or ``none``)
    release: ChartRelease | None = None
    #: with ``--install none``, until :func:`open_installed`: the plan whose last stages wait for the caller's install
    pending_install: Plan | None = None

    def supervisors(self) -> list[Supervisor]:
        """Every supervisor of the sandbox's host processes that the console revives: the
        gpucaas services', kube-proxy's and CoreDNS's, and Kueue's."""
        return [self.supervisor, *(s for s in (self.service_network, self.kueue) if s is not None)]

    def revive(self) -> list[tuple[Supervisor, Revival]]:
        """One round of starting crashed host processes again (each supervisor's back-off):
        what was noticed or restarted, with the supervisor whose logs tell why."""
        return [(s, event) for s in self.supervisors() for event in s.revive()]

    def kubeconfig_of(self, process: str) -> Path:
        """The kubeconfig ``process`` runs with: its own identity's (the admin's on a given cluster)."""
        identity = self.identities.get(process)
        return identity.kubeconfig if identity is not None else self.kubeconfig

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.tls.ca_cert))

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30, context=self.ssl_context()) as resp:
            return json.loads(resp.read() or b"null")

    def stop(self) -> None:
        """Whatever of it runs: the volume hand-over, the ingress controller and the services,
        the forwarders to this machine's servers, kube-proxy and CoreDNS, kube-proxy's network
        namespace (its rules go with it),
        then the real nodes, Kueue (once nothing queues by it), Cilium's operator and (the
        ``cilium`` network) its uplink, the registries and the control plane."""
        if self.volume_ownership is not None:
            self.volume_ownership.stop()
        if self.ingress is not None:
            self.ingress.stop()
        self.supervisor.stop()
        if self.api_forwarder is not None:
            self.api_forwarder.stop()
        if self.host_services is not None:
            self.host_services.stop()
        if self.service_network is not None:
            self.service_network.stop()
        if self.service_range is not None:
            release_range(self.service_range)
        for node in self.real_nodes.values():
            node.stop()
        if self.kueue is not None:
            self.kueue.stop()
        if self.cilium_operator is not None:
            self.cilium_operator.stop()
        if self.network == "cilium":
            cilium.uplink_down()
        if self.registries is not None:
            self.registries.stop()
        if self.cluster is not None:
            self.cluster.stop()


def start(
    state_dir: Path,
    *,
    nodes: tuple[str, ...] = DEFAULT_NODES,
    api_port: int = 8443,
    kubeconfig: Path | None = None,
    admin_token: str | None = None,
    progress: Any = None,
    chart_objects: list[dict[str, Any]] | None = None,
    allocation_mode: str = "device-plugin",
    database_url: str | None = None,
    api_replicas: int = 1,
    compaction_interval: str | None = None,
    network: str = "bridge",
    install: str = "processes",
    queueing: str = "none",
    release: ChartRelease | None = None,
    mirrors: dict[str, str] | None = None,
    lazy_pull_nodes: tuple[str, ...] | None = None,
) -> Sandbox:
    """Start everything; returns once every part answers. The caller owns ``stop()``.

    ``nodes``: the GPU nodes, each a real node (kubelet, containerd and runc run its containers;
    the Kata handler runs runc: no VM boots here); none on a given cluster (``kubeconfig``).

    ``chart_objects``: the chart's cluster side to install instead of rendering it
    (:func:`identities.cluster_side`), e.g. with a rule removed to see what breaks.

    ``database_url``: the API's database (a SQLite file in ``state_dir`` by default);
    ``api_replicas``: how many API processes serve it, each on a port of its own (the first on
    ``api_port``; the supervisor names them ``api``, ``api-2``, ...), as a Deployment's replicas
    behind one Service; more than one needs a database they can share (PostgreSQL).
    ``compaction_interval``: kube-apiserver's ``--etcd-compaction-interval`` (own cluster only);
    a short one makes every watch that falls behind meet 410 Gone.
    ``network``: the real nodes' network, ``bridge`` (one bridge per node on this machine's
    namespace; policies are objects only) or ``cilium`` (each node in a network namespace of
    its own with a Cilium agent enforcing the policies; :mod:`devtools.real_node.cilium`).
    ``install``: ``processes`` (the gpucaas services as processes here), ``helm`` (the chart
    installed on the sandbox's own cluster with its values file by docs/deploy.md's steps,
    :mod:`.chart_install`) or ``none`` (the sandbox's own cluster, nodes, registry and image
    only, made ready for the chart: the caller installs the product with docs/deploy.md's steps
    and the settings in ``<state_dir>/helm/deploy-settings.sh``, then calls
    :func:`open_installed`; the returned sandbox has no tenants' view until then).
    ``queueing``: ``none`` (kube-scheduler's queue; the ResourceQuota caps a tenancy's GPUs) or
    ``kueue`` (Kueue against the sandbox's own cluster; the controller and the API queue by it).
    ``release``: with ``install`` ``helm`` or ``none``, the chart, values file and image installed
    (:class:`.chart_install.ChartRelease`; this work tree's by default).
    ``mirrors``: registry names the nodes pull from an address of the caller's, beside the
    sandbox's own registries (e.g. a registry across a slow link, :mod:`devtools.real_node.slow_link`).
    ``lazy_pull_nodes``: the nodes whose containerd pulls through the stargz snapshotter, mounting
    eStargz layers and fetching their files as they are read (:mod:`devtools.real_node.lazy_pull`;
    the registries hold an eStargz copy of each image, its tag ending ``-esgz``); None: every node.
    """
    if network not in NETWORKS:
        raise ValueError(f"network {network!r}: use bridge or cilium")
    if install not in INSTALLS:
        raise ValueError(f"install {install!r}: use processes, helm or none")
    if install != "processes" and (kubeconfig is not None or network != "bridge" or chart_objects is not None):
        raise ValueError(f"--install {install} is for the sandbox's own cluster, on the bridge network")
    check_queueing(queueing, own_cluster=kubeconfig is None)
    if api_replicas > 1 and (database_url is None or database_url.startswith("sqlite")):
        raise ValueError("several API replicas need a database they share (a PostgreSQL URL)")
    if chart_objects is None and (allocation_mode == "dra" or queueing != "none") and kubeconfig is None:
        chart_objects = identities.cluster_side(identities.sandbox_values(allocation_mode, queueing))
    plan = Plan(
        nodes=nodes,
        api_port=api_port,
        kubeconfig=kubeconfig,
        chart_objects=chart_objects,
        allocation_mode=allocation_mode,
        database_url=database_url,
        api_replicas=api_replicas,
        compaction_interval=compaction_interval,
        network=network,
        say=progress or (lambda msg: log.info("%s", msg)),
        install=install,
        queueing=queueing,
        release=release,
        mirrors=dict(mirrors or {}),
        lazy_pull_nodes=lazy_pull_nodes,
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    tls, admin_token = credentials(state_dir, admin_token)
    sandbox = Sandbox(
        state_dir,
        Supervisor(state_dir / "logs"),
        f"https://127.0.0.1:{api_port}",
        kubeconfig or state_dir / KUBECONFIG,
        tls,
        admin_token,
        allocation_mode=allocation_mode,
        network=network,
    )
    try:
        check_node_tools(plan)
        check_kueue_built(plan)
        start_cluster(sandbox, plan)
        start_kueue(sandbox, plan)
        start_nodes(sandbox, plan)
        if plan.helm:
            start_service_network(sandbox, plan)
        if plan.install == "none":
            prepare_chart(sandbox, plan)
            sandbox.pending_install = plan
            return sandbox
        if plan.helm:
            install_chart(sandbox, plan)
        else:
            start_product(sandbox, plan)
        open_tenant_view(sandbox, plan)
    except BaseException:
        sandbox.stop()
        raise
    return sandbox


def open_installed(sandbox: Sandbox) -> None:
    """With ``install`` ``none``, once the caller's docs/deploy.md steps have installed the
    release: what ``helm`` does after them (every node's GPUs offered, the API and the extender
    forwarded), then the tenants' view. The caller still owns ``stop()``."""
    plan = sandbox.pending_install
    if plan is None:
        raise ValueError("the sandbox is not waiting for an install (start it with install='none')")
    open_release(sandbox, plan)
    open_tenant_view(sandbox, plan)
    sandbox.pending_install = None
