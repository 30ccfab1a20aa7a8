"""The sandbox's first stage, the cluster: a Kubernetes control plane and what a cluster holds
before gpucaas runs on it.

On the sandbox's own cluster: the control plane from the pinned upstream binaries
(:mod:`devtools.local_cluster`, kept in ``<state>/cluster`` across runs), the nodes' static
tokens, the hand-over of tenant volumes (:mod:`.hostpath_volumes`), the CRDs (the chart's and
Cilium's), Cilium's operator on the ``cilium`` network, and the chart's cluster side with one
kubeconfig per gpucaas process (:mod:`.identities`); with ``--install helm``, Cilium's CRD only
(the chart's release holds the rest, :mod:`.chart_install`). On a given cluster: the CRDs only.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools import folders
from devtools.local_cluster import KUBE_VERSION, ClusterOptions, LocalCluster
from devtools.local_cluster.objects import create_all
from devtools.real_node import cilium
from devtools.real_node.node import unmount_under
from devtools.sandbox import host_database, host_services, hostpath_volumes, identities, service_range
from devtools.sandbox.tenant_view import publish_kubeconfig
from services.api.domain.pods import DEFAULT_RUN_AS_USER

if TYPE_CHECKING:
    from devtools.sandbox.runner import Plan, Sandbox

#: the UID/GID the API runs tenant containers as (its GPUCAAS_TENANT_RUN_AS_USER, left at its default)
TENANT_UID = DEFAULT_RUN_AS_USER


def start_cluster(sandbox: Sandbox, plan: Plan) -> None:
    """The control plane (own cluster only), the CRDs, Cilium's operator (``cilium`` network)
    and the chart's cluster side with the processes' identities (own cluster only)."""
    say = plan.say
    static_tokens: dict[str, str] = {}
    if plan.own_cluster:
        if plan.cilium:
            say(f"making the Cilium nodes' uplink {cilium.UPLINK} ({cilium.HOST_ADDRESS} is this machine)")
            cilium.uplink_up()
        # each part is the sandbox's before it starts: stopping the sandbox stops a part that failed half-way
        cluster = sandbox.cluster = local_cluster(
            sandbox.state_dir,
            plan.nodes,
            cluster_mode(plan.allocation_mode, plan.queueing),
            say,
            plan.compaction_interval,
            bind_address="0.0.0.0" if plan.cilium else "127.0.0.1",
            apiserver_args=host_services.APISERVER_ARGS if plan.helm else [],
        )
        if plan.helm:
            kept = (cluster.folder / "etcd").exists()
            services = sandbox.service_range = service_range.claim(sandbox.state_dir, kept=kept)
            cluster.options.service_cidr = services.cidr
            say(
                f"the Service range {services.cidr}, routed into the network namespace {services.namespace} "
                "where the sandbox's kube-proxy will run"
            )
        say(
            f"starting Kubernetes {KUBE_VERSION} (etcd, kube-apiserver, kube-controller-manager) from {cluster.bin_dir}"
        )
        cluster.start()
        publish_kubeconfig(sandbox)
        static_tokens = identities.write_token_file(sandbox.state_dir / "kube-tokens.csv", plan.nodes)
        sandbox.audit_log = cluster.audit_log
        sandbox.volume_ownership = hostpath_volumes.VolumeOwnership(TENANT_UID, TENANT_UID).start()
    if plan.helm:  # the chart's CRDs are the release's: Helm creates them
        say("creating Cilium's policy CRD")
        create_all(sandbox.kubeconfig, [cilium_policy_crd()])
    else:
        say("creating CRDs and Cilium's policy CRD")
        create_all(sandbox.kubeconfig, cluster_objects())
    if plan.cilium:
        assert sandbox.cluster is not None
        say("starting Cilium's operator (it registers Cilium's CRDs)")
        operator = sandbox.cilium_operator = cilium.Operator(sandbox.state_dir / "cilium", sandbox.cluster)
        operator.start()
    if plan.own_cluster and not plan.helm:
        sandbox.identities = make_identities(
            sandbox.state_dir,
            sandbox.kubeconfig,
            static_tokens,
            plan.nodes,
            say,
            plan.chart_objects,
            plan.allocation_mode,
        )


def cluster_mode(allocation_mode: str, queueing: str) -> str:
    """What the cluster's state is made for: the allocation mode, and the queueing when it is not
    ``none`` (Kueue's webhook configurations stay in etcd and would hold every tenant pod once
    Kueue no longer runs)."""
    return allocation_mode if queueing == "none" else f"{allocation_mode}, queueing {queueing}"


def local_cluster(
    state_dir: Path,
    nodes: tuple[str, ...],
    mode: str,
    say: Any,
    compaction_interval: str | None = None,
    bind_address: str = "127.0.0.1",
    apiserver_args: list[str] | None = None,
) -> LocalCluster:
    """The sandbox's control plane (not started yet), kept in ``state_dir/cluster`` across runs of the same
    :func:`cluster_mode`; a run in another mode starts from an empty etcd (each mode installs
    its own RBAC and objects), keeping the certificates so that kubeconfigs stay valid."""
    folder = state_dir / "cluster"
    mode_file = folder / "allocation-mode"  # named for what it held first: a state folder of then stays valid
    if mode_file.exists() and mode_file.read_text().strip() != mode:
        say(f"the cluster's state is from the mode {mode_file.read_text().strip()!r}: starting it empty for {mode!r}")
        shutil.rmtree(folder / "etcd", ignore_errors=True)
        (state_dir / "gpucaas.db").unlink(missing_ok=True)
        unmount_under(state_dir / "nodes")  # what a real node's kubelet left mounted, if it was killed
        folders.remove(state_dir / "nodes")
    if not (folder / "etcd").exists():  # an empty cluster: the chart-installed API's records go too
        host_database.drop(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    mode_file.write_text(mode + "\n")
    tokens = state_dir / "kube-tokens.csv"
    identities.write_token_file(tokens, nodes)
    return LocalCluster(
        folder,
        ClusterOptions(
            token_auth_file=tokens,
            run_scheduler=False,
            encryption_config=secrets_encryption(folder / "pki"),
            compaction_interval=compaction_interval,
            # tenant volumes (hostpath_volumes)
            controller_manager_args=[hostpath_volumes.CONTROLLER_MANAGER_FLAG],
            bind_address=bind_address,
            apiserver_args=apiserver_args or [],
        ),
    )


def secrets_encryption(folder: Path) -> dict[str, Any]:
    """kube-apiserver's EncryptionConfiguration for the sandbox: Secrets (tenant secrets,
    registry credentials, tokens) are stored in etcd encrypted with secretbox (XSalsa20 and
    Poly1305) under a key made once and kept beside the cluster's certificates; anything
    written before it is still read (``identity`` last). docs/deploy.md gives the production
    equivalent (a KMS v2 provider)."""
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


def cluster_objects() -> list[dict[str, Any]]:
    """What the cluster has before the chart's templates: the chart's CRDs (Helm's crds/) and Cilium's CRD."""
    from core.crds import crd_manifests
    from gpucaas.chart import chart_crds

    chart = chart_crds()
    names = {c["metadata"]["name"] for c in chart}
    return [*chart, *(c for c in crd_manifests() if c["metadata"]["name"] not in names), cilium_policy_crd()]


def cilium_policy_crd() -> dict[str, Any]:
    """Cilium's CiliumNetworkPolicy CRD: the controller and the API write such policies on either network."""
    return dict(yaml.safe_load((Path(__file__).parent / "cilium-crd.yaml").read_text()))


def dra_cluster_objects(chart_objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the DRA mode needs beyond the chart's cluster side: the DeviceClass unless the
    chart ships it (``draDriver.deviceClasses``)."""
    from core import dra

    if any(o["kind"] == "DeviceClass" for o in chart_objects):
        return []
    return [dra.device_class()]


def make_identities(
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


def node_bound_identity(
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
