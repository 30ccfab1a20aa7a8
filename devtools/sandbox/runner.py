"""`gpucaas sandbox`: the whole control plane and two GPU nodes (fake HGX H100 boards) on one machine.

Start order (each step waits until the part answers):
  1. a Kubernetes control plane from the pinned upstream binaries
     (:mod:`devtools.local_cluster`: etcd, kube-apiserver with Node,RBAC
     authorisation, NodeRestriction, Pod Security and an audit log, kube-controller-manager),
     the cluster objects a real cluster would already have (CRDs, Cilium's policy CRD), and
     the chart's cluster side rendered by the real Helm engine (ServiceAccounts, RBAC,
     RuntimeClass, ConfigMaps); then one ServiceAccount token per component (TokenRequest)
     and one kubeconfig per process (:mod:`.identities`): no gpucaas process runs as the admin;
  2. the tenancy + lease controller (Kopf);
  3. the local registries, then per node: a fake sysfs board with real ``/dev/vfio`` character
     devices, the fabric service (Fabric Manager simulator, and the service VM under libvirt's
     test driver), a real node (:mod:`devtools.real_node`: containerd, runc and the pinned
     kubelet as ``system:node:<name>``; the Kata handler runs runc, no VM boots here) and the
     device plugin, which registers with that kubelet over gRPC;
  4. the scheduler extender, then kube-scheduler configured with the chart's extender
     configuration (``deploy/scheduler/``);
In the ``dra`` allocation mode each node runs the DRA driver instead of the device plugin
(registered with the kubelet's plugin watcher), the chart's DeviceClasses are created,
kube-controller-manager's resourceclaim controller makes the pods' claims, and
kube-scheduler's DynamicResources plugin allocates them (the extender only scores).
  5. the API over HTTPS with a self-signed certificate.
With ``--kubeconfig`` a real cluster is used and only the control-plane parts run.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.fake_sysfs import build_hgx_h100, load_board
from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.local_cluster.binaries import bin_dir as kube_bin_dir, binary
from devtools.local_cluster.cluster import free_port
from devtools.local_cluster.objects import create_all
from devtools.local_cluster.processes import unix_socket_ready
from devtools.real_node import cilium
from devtools.real_node.devices import make_char_devices
from devtools.real_node.node import (
    NodeOptions,
    RealNode,
    node_tools_missing,
    unmount_under,
)
from devtools.real_node.registry import Registries
from devtools.sandbox import hostpath_volumes, identities
from devtools.sandbox.ingress import (
    AUTH_ANNOTATIONS,
    TRAEFIK_VERSION,
    Ingress,
    write_info as write_ingress_info,
)
from devtools.sandbox.supervisor import (
    ServiceSpec,
    Supervisor,
    http_ready,
)
from devtools.sandbox.tls import ENDPOINT_DOMAIN, TLSFiles, ensure_self_signed
from services.api.domain.pods import DEFAULT_RUN_AS_USER

log = logging.getLogger(__name__)


def node_names(count: int) -> tuple[str, ...]:
    """The sandbox's GPU nodes' names: ``gpu-node-a``, ``gpu-node-b``, ..."""
    return tuple(f"gpu-node-{chr(ord('a') + i)}" for i in range(count))


#: as many as ``gpucaas sandbox``'s ``real_nodes`` setting gives by default (a test holds them equal)
DEFAULT_NODES = node_names(2)
#: the labels of the sandbox's GPU nodes: the one the placement and the DaemonSets select on, the
#: instance type, and the product name NVIDIA GPU Feature Discovery gives an H100 SXM node (usage
#: records read it)
GPU_NODE_LABELS = {
    "gpucaas.dev/gpu-node": "true",
    "node.kubernetes.io/instance-type": "hgx-h100-8",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
}
#: the UID/GID the API runs tenant containers as (its GPUCAAS_TENANT_RUN_AS_USER, left at its default)
TENANT_UID = DEFAULT_RUN_AS_USER
DEMO_TENANCY = "demo"


@dataclass
class NodePaths:
    name: str
    root: Path

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
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        return self.kubelet_dir / "device-plugins"

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet_dir / "pod-resources" / "kubelet.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def fabric_socket(self) -> Path:
        return self.root / "fabric.sock"

    @property
    def fabric_state_dir(self) -> Path:
        return self.root / "fabric-state"

    @property
    def dra_registry_dir(self) -> Path:
        return self.kubelet_dir / "plugins_registry"

    @property
    def dra_plugins_dir(self) -> Path:
        return self.kubelet_dir / "plugins"

    @property
    def dra_state_dir(self) -> Path:
        return self.root / "dra-state"


@dataclass
class Sandbox:
    """What a running sandbox offers: URLs, tokens, files, and its supervisor."""

    state_dir: Path
    supervisor: Supervisor
    api_url: str
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
        if self.volume_ownership is not None:
            self.volume_ownership.stop()
        _stop_all(
            self.supervisor,
            self.real_nodes,
            self.registries,
            self.cluster,
            self.ingress,
            self.cilium_operator,
            uplink=self.network == "cilium",
        )


def _stop_all(
    sup: Supervisor,
    real: dict[str, RealNode],
    registries: Registries | None,
    cluster: LocalCluster | None,
    ingress: Ingress | None = None,
    operator: cilium.Operator | None = None,
    *,
    uplink: bool = False,
) -> None:
    """The ingress controller and the services, then the real nodes, Cilium's operator and
    (``uplink``: the ``cilium`` network) its uplink, the registries and the control plane."""
    if ingress is not None:
        ingress.stop()
    sup.stop_all()
    for node in real.values():
        node.stop()
    if operator is not None:
        operator.stop()
    if uplink:
        cilium.uplink_down()
    if registries is not None:
        registries.stop()
    if cluster is not None:
        cluster.stop()


#: a container's share of a real node: this machine (2 CPUs, 24 GiB, no 1 GiB pages reserved)
#: stands in for an HGX server's 224 threads and 2 TiB, so an 8-GPU container and the
#: RuntimeClass's overhead (500m, 1 GiB) must fit in what it has
REAL_NODE_SIZING = {
    "GPUCAAS_CPU_PER_GPU": "150m",
    "GPUCAAS_MEMORY_PER_GPU": "2Gi",
    "GPUCAAS_SHM_PER_GPU": "256Mi",
    "GPUCAAS_KATA_HUGEPAGES": "false",
}


def _node_status(kubeconfig: Path, name: str) -> dict[str, Any]:
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        try:
            return dict(client.CoreV1Api(api).read_node(name).to_dict().get("status") or {})
        except client.ApiException:
            return {}


def node_offers_gpus(kubeconfig: Path, name: str, resource: str = "nvidia.com/gpu") -> Any:
    """Ready when the real kubelet reports the device plugin's GPUs as allocatable."""
    return lambda: int((_node_status(kubeconfig, name).get("allocatable") or {}).get(resource, "0")) > 0


def published_slices(kubeconfig: Path, name: str) -> Any:
    """Ready when the DRA driver has published its ResourceSlices for the node."""
    from kubernetes import client

    from core.kube import new_api_client

    def check() -> bool:
        with new_api_client(kubeconfig) as api:
            slices: Any = client.CustomObjectsApi(api).list_cluster_custom_object(  # plain JSON
                "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={name}"
            )
        return bool(slices.get("items"))

    return check


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads: tokens, kubeconfigs, registry passwords."""
    path.write_text(text)
    path.chmod(0o600)


def _node_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    return {
        "GPUCAAS_NODE_NAME": node.name,
        "GPUCAAS_KUBECONFIG": str(kubeconfig),
        "KUBECONFIG": str(kubeconfig),
        "GPUCAAS_SYSFS_ROOT": str(node.sysfs),
        "GPUCAAS_DEV_ROOT": str(node.dev),
        "GPUCAAS_FABRIC_SOCKET": str(node.fabric_socket),
    }


def fabric_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    """The fabric service of a sandbox node: FM simulator on the fake board, service VM on libvirt's test driver."""
    return {
        "GPUCAAS_FABRIC_NODE_NAME": node.name,
        "GPUCAAS_FABRIC_SOCKET": str(node.fabric_socket),
        "GPUCAAS_FABRIC_STATE_DIR": str(node.fabric_state_dir),
        "GPUCAAS_FABRIC_SYSFS_ROOT": str(node.sysfs),
        # The simulator only when asked for, and as Fabric Manager on H100 behaves: no PCI bus
        # id or UUID in partition info (the board's layout maps module ids), restart mode after
        # the service VM's first boot (docs/fabric-manager.md).
        "GPUCAAS_FABRIC_FM_BACKEND": "simulator",
        "GPUCAAS_FABRIC_SIMULATOR_H100": "true",
        "GPUCAAS_FABRIC_BOARD": str(node.board / "board.json"),
        "GPUCAAS_FABRIC_SIMULATE_FM_IN_VM": "true",
        "GPUCAAS_FABRIC_LIBVIRT_URI": "test:///default",
        "GPUCAAS_FABRIC_DOMAIN_TYPE": "test",
        "GPUCAAS_FABRIC_DOMAIN_NAME": f"gpucaas-fabric-{node.name}",
        "GPUCAAS_FABRIC_FM_CHANNEL": "none",
        "GPUCAAS_FABRIC_DISK_IMAGE": str(node.fabric_state_dir / "service-vm.qcow2"),
        "GPUCAAS_FABRIC_KUBECONFIG": str(kubeconfig),
        "GPUCAAS_FABRIC_PUBLISH_INTERVAL_S": "2",
        "GPUCAAS_FABRIC_RELEASE_GRACE_S": "3",
    }


def device_plugin_env(state_dir: Path) -> dict[str, str]:
    """Leases on, golden firmware of the fake board, quick PodResources scans for a lively sandbox."""
    golden = state_dir / "golden-firmware.json"
    if not golden.exists():
        from devtools.fake_sysfs import (
            GOLDEN_ROM_VERSION,
            H100_SXM5_DEVICE,
            golden_rom_sha256,
        )

        golden.write_text(
            json.dumps({H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}})
        )
    return {
        "GPUCAAS_LEASES": "true",
        "GPUCAAS_FIRMWARE_GOLDEN_FILE": str(golden),
        "GPUCAAS_FIRMWARE_ROM_TOGGLE": "false",  # the fake board's rom is a plain file
        "GPUCAAS_POD_RESOURCES_INTERVAL": "1",
        "GPUCAAS_FABRIC_SYNC_GRACE": "3",
        "GPUCAAS_LEASE_INTERVAL": "0.5",
    }


def dra_driver_env(node: NodePaths, kubeconfig: Path) -> dict[str, str]:
    """The DRA driver of a sandbox node: binding conditions on, quick rounds for a lively sandbox."""
    return {
        "GPUCAAS_DRA_NODE_NAME": node.name,
        "GPUCAAS_DRA_KUBECONFIG": str(kubeconfig),
        "GPUCAAS_DRA_REGISTRY_DIR": str(node.dra_registry_dir),
        "GPUCAAS_DRA_PLUGINS_DIR": str(node.dra_plugins_dir),
        "GPUCAAS_DRA_STATE_DIR": str(node.dra_state_dir),
        "GPUCAAS_DRA_FABRIC_SOCKET": str(node.fabric_socket),
        "GPUCAAS_DRA_BINDING_CONDITIONS": "true",
        "GPUCAAS_DRA_PUBLISH_INTERVAL_S": "2",
        "GPUCAAS_DRA_BINDING_INTERVAL_S": "0.5",
        # no device plugin on the node: the driver writes the CDI spec
        "GPUCAAS_DRA_CDI_DIR": str(node.cdi_dir),
        "GPUCAAS_DRA_SYSFS_ROOT": str(node.sysfs),
        "GPUCAAS_DRA_DEV_ROOT": str(node.dev),
    }


def dra_cluster_objects(chart_objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the DRA mode needs beyond the chart's cluster side: the DeviceClasses (1, 2, 4, 8
    GPUs) unless the chart ships them (``draDriver.deviceClasses``)."""
    from core import dra

    if any(o["kind"] == "DeviceClass" for o in chart_objects):
        return []
    return [dra.device_class(size) for size in (1, *dra.NVLINK_SIZES)]


SCHEDULER_CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "scheduler"


def scheduler_config(allocation_mode: str, extender_url: str) -> dict[str, Any]:
    """kube-scheduler's configuration: the chart's own file for the mode
    (``deploy/scheduler/kube-scheduler-config[-dra].yaml``), its extender at ``extender_url``."""
    name = "kube-scheduler-config-dra.yaml" if allocation_mode == "dra" else "kube-scheduler-config.yaml"
    config = yaml.safe_load((SCHEDULER_CONFIGS / name).read_text())
    for extender in config.get("extenders") or []:
        extender["urlPrefix"] = extender_url
    return dict(config)


def start_cluster(
    state_dir: Path,
    nodes: tuple[str, ...],
    allocation_mode: str,
    say: Any,
    compaction_interval: str | None = None,
    bind_address: str = "127.0.0.1",
) -> LocalCluster:
    """The sandbox's control plane, kept in ``state_dir/cluster`` across runs of the same
    allocation mode; a run in the other mode starts from an empty etcd (each mode installs
    its own RBAC and objects), keeping the certificates so that kubeconfigs stay valid."""
    import shutil

    folder = state_dir / "cluster"
    mode_file = folder / "allocation-mode"
    if mode_file.exists() and mode_file.read_text().strip() != allocation_mode:
        say(
            f"the cluster's state is from the {mode_file.read_text().strip()} mode: starting it empty "
            f"for the {allocation_mode} mode"
        )
        shutil.rmtree(folder / "etcd", ignore_errors=True)
        (state_dir / "gpucaas.db").unlink(missing_ok=True)
        unmount_under(state_dir / "nodes")  # what a real node's kubelet left mounted, if it was killed
        shutil.rmtree(state_dir / "nodes", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    mode_file.write_text(allocation_mode + "\n")
    tokens = state_dir / "kube-tokens.csv"
    identities.write_token_file(tokens, nodes)
    cluster = LocalCluster(
        folder,
        ClusterOptions(
            token_auth_file=tokens,
            run_scheduler=False,
            encryption_config=secrets_encryption(folder / "pki"),
            compaction_interval=compaction_interval,
            # tenant volumes (hostpath_volumes)
            controller_manager_args=[hostpath_volumes.CONTROLLER_MANAGER_FLAG],
            bind_address=bind_address,
        ),
    )
    say(
        f"starting Kubernetes {cluster_version()} (etcd, kube-apiserver, kube-controller-manager) "
        f"from {cluster.bin_dir}"
    )
    return cluster.start()


def secrets_encryption(folder: Path) -> dict[str, Any]:
    """kube-apiserver's EncryptionConfiguration for the sandbox: Secrets (tenant secrets,
    registry credentials, tokens) are stored in etcd encrypted with secretbox (XSalsa20 and
    Poly1305) under a key made once and kept beside the cluster's certificates; anything
    written before it is still read (``identity`` last). docs/deploy.md gives the production
    equivalent (a KMS v2 provider)."""
    import base64

    key_file = folder / "secrets-encryption-key"
    if not key_file.exists():
        folder.mkdir(parents=True, exist_ok=True)
        key_file.write_bytes(base64.b64encode(os.urandom(32)))
        key_file.chmod(0o600)
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [
            {
                "resources": ["secrets"],
                "providers": [
                    {"secretbox": {"keys": [{"name": "sandbox-1", "secret": key_file.read_text().strip()}]}},
                    {"identity": {}},
                ],
            }
        ],
    }


def cluster_version() -> str:
    from devtools.local_cluster import KUBE_VERSION

    return KUBE_VERSION


def cluster_objects() -> list[dict[str, Any]]:
    """What the cluster has before the chart's templates: the chart's CRDs (Helm's crds/) and Cilium's CRD."""
    from core.crds import crd_manifests
    from gpucaas.chart import chart_crds

    cilium = yaml.safe_load((Path(__file__).parent / "cilium-crd.yaml").read_text())
    chart = chart_crds()
    names = {c["metadata"]["name"] for c in chart}
    return [*chart, *(c for c in crd_manifests() if c["metadata"]["name"] not in names), cilium]


def api_secret_rights(chart_objects: list[dict[str, Any]] | None) -> dict[str, str]:
    """What the chart's controller Deployment tells the controller so that each tenant namespace
    gets the RoleBinding giving the API its Secret rights there (the API's ServiceAccount and the
    tenant-secrets ClusterRole, both as the chart names them)."""
    from gpucaas.chart import NAMESPACE

    objects = chart_objects if chart_objects is not None else identities.cluster_side()
    api_sa = identities.service_accounts(objects).get("api")
    role = next(
        (
            o["metadata"]["name"]
            for o in objects
            if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-tenant-secrets")
        ),
        None,
    )
    if api_sa is None or role is None:
        return {}
    return {
        "GPUCAAS_CONTROLLER_API_SERVICE_ACCOUNT": f"{NAMESPACE}/{api_sa}",
        "GPUCAAS_CONTROLLER_API_SECRETS_CLUSTER_ROLE": role,
    }


def tenant_pod_security_level() -> str:
    """The Pod Security level tenant namespaces enforce: values-production.yaml's, as on a production install.

    ``GPUCAAS_SANDBOX_TENANT_POD_SECURITY`` overrides it (e.g. ``baseline``, to try a change
    before the tenant pods it builds meet ``restricted``).
    """
    from gpucaas.chart import production_values

    override = os.environ.get("GPUCAAS_SANDBOX_TENANT_POD_SECURITY")
    return override or str(production_values().get("controller", {}).get("podSecurityLevel") or "baseline")


def _make_identities(
    state_dir: Path,
    admin_kubeconfig: Path,
    static_tokens: dict[str, str],
    nodes: tuple[str, ...],
    say: Any,
    chart_objects: list[dict[str, Any]] | None = None,
    allocation_mode: str = "device-plugin",
) -> dict[str, identities.Identity]:
    """Install the chart's cluster side and write one kubeconfig per gpucaas process."""
    from gpucaas.chart import NAMESPACE

    objects = chart_objects if chart_objects is not None else identities.cluster_side()
    if allocation_mode == "dra":
        objects = [*objects, *dra_cluster_objects(objects)]
    say("installing the chart's cluster side (rendered by Helm): ServiceAccounts, RBAC, RuntimeClass, ConfigMaps")
    create_all(admin_kubeconfig, objects)
    out: dict[str, identities.Identity] = {}
    folder = state_dir / "identities"
    for component, sa in identities.service_accounts(objects).items():
        user = f"system:serviceaccount:{NAMESPACE}:{sa}"
        token = identities.mint_token(admin_kubeconfig, NAMESPACE, sa)
        path = identities.write_kubeconfig(admin_kubeconfig, folder / f"{component}.kubeconfig", user, token)
        out[component] = identities.Identity(component, user, path)
    for node in nodes:
        user = f"system:node:{node}"
        path = identities.write_kubeconfig(
            admin_kubeconfig, folder / f"node-{node}.kubeconfig", user, static_tokens[user]
        )
        out[f"node-{node}"] = identities.Identity(f"node-{node}", user, path)
    return out


def _node_bound_identity(
    state_dir: Path, admin_kubeconfig: Path, ids: dict[str, identities.Identity], component: str, node: str
) -> Path:
    """A kubeconfig for ``component`` on ``node`` whose ServiceAccount token is bound to the Node."""
    from devtools.waiting import wait_for
    from gpucaas.chart import NAMESPACE

    base = ids[component]
    sa = base.user.rsplit(":", 1)[-1]
    wait_for(lambda: _node_exists(admin_kubeconfig, node), 120, interval=0.2, what=f"node {node} registered")
    token = identities.mint_token(admin_kubeconfig, NAMESPACE, sa, node=node)
    path = identities.write_kubeconfig(
        admin_kubeconfig, state_dir / "identities" / f"{component}@{node}.kubeconfig", base.user, token
    )
    ids[f"{component}@{node}"] = identities.Identity(f"{component}@{node}", base.user, path)
    return path


def _node_exists(admin_kubeconfig: Path, node: str) -> bool:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from core.kube import new_api_client

    with new_api_client(admin_kubeconfig) as api:
        try:
            client.CoreV1Api(api).read_node(node)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
    return True


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
    """
    if network not in ("bridge", "cilium"):
        raise ValueError(f"network {network!r}: use bridge or cilium")
    if api_replicas > 1 and (database_url is None or database_url.startswith("sqlite")):
        raise ValueError("several API replicas need a database they share (a PostgreSQL URL)")
    say = progress or (lambda msg: log.info("%s", msg))
    if chart_objects is None and allocation_mode == "dra" and kubeconfig is None:
        chart_objects = identities.cluster_side(identities.sandbox_values(allocation_mode))
    state_dir.mkdir(parents=True, exist_ok=True)
    sup = Supervisor(state_dir / "logs")
    tls = ensure_self_signed(state_dir / "tls")
    token_file = state_dir / "admin-token"
    admin_token = admin_token or (token_file.read_text().strip() if token_file.exists() else None)
    admin_token = admin_token or f"gca_{secrets.token_urlsafe(32)}"
    write_private(token_file, admin_token + "\n")
    real_cluster = kubeconfig is not None
    ids: dict[str, identities.Identity] = {}
    audit_log: Path | None = None

    def kc(process: str) -> Path:
        """The kubeconfig ``process`` runs with: its own identity (the given kubeconfig on a real cluster)."""
        assert kubeconfig is not None
        return ids[process].kubeconfig if process in ids else kubeconfig

    def kube_env(process: str) -> dict[str, str]:
        return {"GPUCAAS_KUBECONFIG": str(kc(process)), "KUBECONFIG": str(kc(process))}

    cluster: LocalCluster | None = None
    real: dict[str, RealNode] = {}
    registries: Registries | None = None
    ownership: hostpath_volumes.VolumeOwnership | None = None
    ingress: Ingress | None = None
    operator: cilium.Operator | None = None
    with_cilium = network == "cilium"
    try:
        missing = [] if real_cluster else node_tools_missing()
        if with_cilium:
            if real_cluster:
                raise OSError("the cilium network is the sandbox's own nodes' network: it needs no --kubeconfig")
            missing += cilium.missing(kube_bin_dir())
        if missing:
            raise OSError("a GPU node needs " + ", ".join(missing) + " (make install adds the packages)")
        if not real_cluster:
            if with_cilium:
                say(f"making the Cilium nodes' uplink {cilium.UPLINK} ({cilium.HOST_ADDRESS} is this machine)")
                cilium.uplink_up()
            cluster = start_cluster(
                state_dir,
                nodes,
                allocation_mode,
                say,
                compaction_interval,
                bind_address="0.0.0.0" if with_cilium else "127.0.0.1",
            )
            kubeconfig = state_dir / "kubeconfig"
            write_private(kubeconfig, cluster.admin_kubeconfig.read_text())
            static_tokens = identities.write_token_file(state_dir / "kube-tokens.csv", nodes)
            audit_log = cluster.audit_log
            ownership = hostpath_volumes.VolumeOwnership(TENANT_UID, TENANT_UID).start()
        assert kubeconfig is not None
        say("creating CRDs and Cilium's policy CRD")
        create_all(kubeconfig, cluster_objects())
        if with_cilium:
            assert cluster is not None
            say("starting Cilium's operator (it registers Cilium's CRDs)")
            operator = cilium.Operator(state_dir / "cilium", cluster).start()
        if not real_cluster:
            ids = _make_identities(state_dir, kubeconfig, static_tokens, nodes, say, chart_objects, allocation_mode)

        say("starting the tenancy and GPU lease controller")
        sup.start(
            ServiceSpec(
                "controller",
                ["controller", "--standalone", "--kubeconfig", str(kc("controller"))],
                env={
                    **kube_env("controller"),
                    "GPUCAAS_CONTROLLER_POD_SECURITY_LEVEL": tenant_pod_security_level(),
                    "GPUCAAS_CONTROLLER_ALLOCATION_MODE": allocation_mode,
                    **api_secret_rights(chart_objects),
                },
                ready=None,
            )
        )

        node_paths: list[NodePaths] = []
        if not real_cluster:
            say(
                "starting the local registries (public images built from busybox-static; a private one "
                "that asks for credentials) and pushing the images"
            )
            registries = Registries(
                state_dir / "registries",
                bind=cilium.HOST_ADDRESS if with_cilium else "127.0.0.1",
            ).start()
            write_private(state_dir / "registry.json", json.dumps(registries.info(), indent=2) + "\n")
        if not real_cluster:
            for index, name in enumerate(nodes):
                node = NodePaths(name, state_dir / "nodes" / name)
                node_paths.append(node)
                if not (node.board / "board.json").exists():
                    build_hgx_h100(node.board)
                load_board(node.board)
                make_char_devices(node.dev)
                for d in (
                    node.device_plugin_dir,
                    node.cdi_dir,
                    node.fabric_state_dir,
                    node.pod_resources_socket.parent,
                ):
                    d.mkdir(parents=True, exist_ok=True)
                say(f"[{name}] starting the fabric service (Fabric Manager simulator, service VM on libvirt test:///)")
                sup.start(
                    ServiceSpec(
                        f"fabric-{name}",
                        ["fabric"],
                        env={**_node_env(node, kc("fabric")), **fabric_env(node, kc("fabric"))},
                        ready=unix_socket_ready(node.fabric_socket),
                    )
                )
                assert cluster is not None and registries is not None
                address = cilium.node_address(index) if with_cilium else ""
                say(
                    f"[{name}] starting a real node: containerd, runc and kubelet {cluster_version()} "
                    "(the kata-qemu-nvidia-gpu handler runs runc here: no VM boots on this machine)"
                    + (f"; its network: Cilium, in a namespace of its own at {address}" if address else "")
                )
                real[name] = RealNode(
                    node.root,
                    cluster,
                    NodeOptions(
                        name,
                        cdi_dirs=(node.cdi_dir,),
                        labels=GPU_NODE_LABELS,
                        mirrors=registries.mirrors(),
                        pod_cidr=cilium.pod_cidr(index) if with_cilium else "",
                        cilium_address=address,
                    ),
                ).start()
                if allocation_mode == "dra":
                    say(
                        f"[{name}] starting the DRA driver (ResourceSlices, NodePrepareResources, binding conditions; "
                        "the GPU-lease agent beside it)"
                    )
                    driver_kc = kc("dra-driver")
                    if not real_cluster:  # its token bound to its node, as a DaemonSet pod's
                        driver_kc = _node_bound_identity(state_dir, kubeconfig, ids, "dra-driver", name)
                    sup.start(
                        ServiceSpec(
                            f"dra-driver-{name}",
                            ["dra-driver"],
                            env={
                                **_node_env(node, driver_kc),
                                **dra_driver_env(node, driver_kc),
                                **device_plugin_env(state_dir),
                            },  # leases and firmware check as beside the plugin
                            ready=published_slices(kubeconfig, name),
                        )
                    )
                    continue
                say(f"[{name}] starting the device plugin (with the GPU-lease agent beside it)")
                sup.start(
                    ServiceSpec(
                        f"device-plugin-{name}",
                        [
                            "device-plugin",
                            "--device-plugin-dir",
                            str(node.device_plugin_dir),
                            "--cdi-dir",
                            str(node.cdi_dir),
                            "--pod-resources-socket",
                            str(node.pod_resources_socket),
                            "--metrics-port",
                            str(free_port()),
                            "--node-name",
                            name,
                        ],
                        env={**_node_env(node, kc("device-plugin")), **device_plugin_env(state_dir)},
                        ready=node_offers_gpus(kubeconfig, name),
                    )
                )

        extender_port = free_port()
        extender_url = f"http://127.0.0.1:{extender_port}"
        say("starting the scheduler extender")
        sup.start(
            ServiceSpec(
                "scheduler-extender",
                [
                    "scheduler-extender",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(extender_port),
                    "--kubeconfig",
                    str(kc("scheduler-extender")),
                ],
                # as the chart: in the DRA mode the extender only scores nodes (no bind verb)
                env={
                    **kube_env("scheduler-extender"),
                    **({"GPUCAAS_PLACEMENT_BIND": "false"} if allocation_mode == "dra" else {}),
                },
                ready=http_ready(f"{extender_url}/healthz"),
            )
        )
        if cluster is not None:
            say(
                "starting kube-scheduler with the chart's scheduler configuration ("
                + (
                    "DynamicResources allocates the claims; the extender scores nodes)"
                    if allocation_mode == "dra"
                    else "the extender filters, scores and binds GPU pods)"
                )
            )
            cluster.start_scheduler(scheduler_config(allocation_mode, extender_url))

        api_url = f"https://127.0.0.1:{api_port}"
        api_urls = [api_url]
        database = database_url or f"sqlite:///{state_dir / 'gpucaas.db'}"
        for replica in range(api_replicas):
            port = api_port if replica == 0 else free_port()
            url = f"https://127.0.0.1:{port}"
            if replica:
                api_urls.append(url)
            name = "api" if replica == 0 else f"api-{replica + 1}"
            say(
                f"starting the API on {url}"
                + (f" (replica {replica + 1} of {api_replicas})" if api_replicas > 1 else "")
            )
            sup.start(
                ServiceSpec(
                    name,
                    [
                        "api",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--tls-cert",
                        str(tls.cert),
                        "--tls-key",
                        str(tls.key),
                        "--database-url",
                        database,
                        "--kubeconfig",
                        str(kc("api")),
                    ],
                    # webhooks may reach receivers on this machine (docs/webhooks.md)
                    env={
                        **kube_env("api"),
                        "GPUCAAS_ADMIN_TOKEN": admin_token,
                        "GPUCAAS_ALLOCATION_MODE": allocation_mode,
                        "GPUCAAS_WEBHOOK_ALLOW_LOOPBACK": "true",
                        **(REAL_NODE_SIZING if real else {}),
                        "GPUCAAS_ENDPOINT_DOMAIN": ENDPOINT_DOMAIN,
                        "GPUCAAS_ENDPOINT_AUTH_ANNOTATIONS": json.dumps(AUTH_ANNOTATIONS),
                        # Traefik runs on this machine, outside the pod network: the nodes see it at HOST_ADDRESS
                        **(
                            {"GPUCAAS_ENDPOINT_INGRESS_CIDRS": json.dumps([f"{cilium.HOST_ADDRESS}/32"])}
                            if with_cilium
                            else {}
                        ),
                    },
                    ready=http_ready(f"{url}/healthz", ca_file=tls.ca_cert),
                )
            )
        if cluster is not None:
            say(
                f"starting the ingress controller (Traefik {TRAEFIK_VERSION}) for container endpoints "
                f"https://<id>-<port>.{ENDPOINT_DOMAIN}"
            )
            ingress = Ingress(state_dir, cluster, kubeconfig, tls, api_url).start(binary("traefik"))
            write_ingress_info(state_dir / "ingress.json", ingress)
        sandbox = Sandbox(
            state_dir,
            sup,
            api_url,
            kubeconfig,
            tls,
            admin_token,
            nodes=node_paths,
            extender_url=extender_url,
            identities=ids,
            audit_log=audit_log,
            allocation_mode=allocation_mode,
            cluster=cluster,
            real_nodes=real,
            registries=registries,
            volume_ownership=ownership,
            ingress=ingress,
            api_urls=api_urls,
            network=network,
            cilium_operator=operator,
        )
        if audit_log is not None:
            say("checking that RBAC refused none of the gpucaas processes")
            identities.check_no_refusals(audit_log, ids)
        say(f"creating the tenancy {DEMO_TENANCY!r} and a tenant token")
        sandbox.tenant_token = ensure_demo_tenant(sandbox)
        write_private(state_dir / "tenant-token", sandbox.tenant_token + "\n")
        write_caasctl_config(sandbox)
        return sandbox
    except BaseException:
        if ownership is not None:
            ownership.stop()
        _stop_all(sup, real, registries, cluster, ingress, operator, uplink=with_cilium)
        raise


def caasctl_config_path(sandbox: Sandbox) -> Path:
    return sandbox.state_dir / "caasctl.yaml"


def write_caasctl_config(sandbox: Sandbox) -> Path:
    """A caasctl config for this sandbox: `export GPUCAAS_CONFIG=<this file>` and caasctl just works."""
    path = caasctl_config_path(sandbox)
    path.write_text(
        yaml.safe_dump(
            {
                "url": sandbox.api_url,
                "token": sandbox.admin_token,
                "ca_cert": str(sandbox.tls.ca_cert),
                "nodes": {n.name: {"fabric_socket": str(n.fabric_socket)} for n in sandbox.nodes},
            },
            sort_keys=False,
        )
    )
    path.chmod(0o600)
    return path


def ensure_demo_tenant(sandbox: Sandbox) -> str:
    import urllib.error

    try:
        sandbox.api("POST", "/v1/admin/tenancies", {"name": DEMO_TENANCY, "gpu_quota": 16})
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise
    return sandbox.api("POST", f"/v1/admin/tenancies/{DEMO_TENANCY}/tokens", {})["token"]


def env_summary(sandbox: Sandbox) -> str:
    return "\n".join(
        [
            f"export GPUCAAS_CONFIG={caasctl_config_path(sandbox)}   # caasctl: URL, admin token, CA, fabric sockets",
            f"export KUBECONFIG={sandbox.kubeconfig}   # kubectl/the kubernetes client: the sandbox's cluster (admin)",
        ]
    )


def tenant_curl(sandbox: Sandbox) -> list[str]:
    """The first request a tenant makes (the sandbox prints it; tests run it): submit a 2-GPU
    container. JSON needs its Content-Type, or the API answers 422."""
    body = '{"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "gpus": 2}'
    return [
        "curl",
        "-sS",
        "--fail-with-body",
        "--cacert",
        str(sandbox.tls.ca_cert),
        "-H",
        f"Authorization: Bearer {sandbox.tenant_token}",
        "-H",
        "Content-Type: application/json",
        "-d",
        body,
        f"{sandbox.api_url}/v1/containers",
    ]


def default_state_dir() -> Path:
    return Path(os.environ.get("GPUCAAS_SANDBOX_DIR", ".sandbox")).resolve()
