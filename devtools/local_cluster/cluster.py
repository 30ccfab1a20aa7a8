"""A local Kubernetes cluster from the upstream binaries: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler as child processes on loopback.

Used by the sandbox, the tests and the benchmarks wherever a Kubernetes API is needed.
The API server runs as a real cluster's would: its own CA and serving certificate,
service-account signing keys (TokenRequest works), ``--authorization-mode=Node,RBAC``,
``NodeRestriction`` on top of the default admission plugins (Pod Security included),
static tokens for identities that are not ServiceAccounts (``--token-auth-file``), and an
audit log whose events the chart-RBAC checks read. kube-controller-manager runs all its
default controllers (namespace deletion, garbage collection, ResourceQuota, ServiceAccounts
and their tokens, the resourceclaim controller) with one ServiceAccount per controller,
and whatever flags the caller adds (the sandbox turns on its HostPath provisioner);
kube-scheduler runs the configuration it is given (the chart's extender configuration, or
the DRA plugins). etcd keeps its data in the cluster's folder.

Every process runs under the development tools' supervisor (:mod:`devtools.processes`) with
its log in ``<folder>/logs/``; a component can be killed and started again
(:meth:`LocalCluster.restart`) to test faults.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.local_cluster.binaries import bin_dir as find_bin_dir
from devtools.local_cluster.objects import create_all
from devtools.local_cluster.pki import PKI, SERVING_NAMES, Pair
from devtools.ports import free_port
from devtools.processes import ProcessFailed, ReadyCheck, Supervisor, http_ready

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: Every request at Metadata level (who, what, the authoriser's decision), none of the bodies.
DEFAULT_AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # the control plane's own heartbeats would be most of the log
        {
            "level": "None",
            "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
            "users": ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"],
        },
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version"]},
        {"level": "Metadata"},
    ],
}


KUBELET_API_ADMIN_BINDING: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "gpucaas:apiserver-kubelet-api-admin"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}],
}


@dataclass
class ClusterOptions:
    """What varies between the clusters the sandbox, the tests and the benchmarks run."""

    #: ``token,user,uid,"group1,group2"`` lines: identities that are not ServiceAccounts
    token_auth_file: Path | None = None
    #: kube-scheduler's KubeSchedulerConfiguration (its clientConnection's kubeconfig and its leader
    #: election are filled in)
    scheduler_config: dict[str, Any] | None = None
    audit_policy: dict[str, Any] | None = field(default_factory=lambda: DEFAULT_AUDIT_POLICY)
    #: kube-apiserver's ``--etcd-compaction-interval`` (``5m`` upstream); short makes watches meet 410 Gone
    compaction_interval: str | None = None
    #: an EncryptionConfiguration for kube-apiserver (``--encryption-provider-config``)
    encryption_config: dict[str, Any] | None = None
    feature_gates: dict[str, bool] = field(default_factory=dict)
    #: etcd without fsync: for throw-away test clusters (envtest does the same), never for kept state
    unsafe_no_fsync: bool = False
    run_scheduler: bool = True
    run_controller_manager: bool = True
    apiserver_args: list[str] = field(default_factory=list)
    #: more kube-controller-manager flags (the sandbox's ``--enable-hostpath-provisioner``)
    controller_manager_args: list[str] = field(default_factory=list)
    #: kube-apiserver's ``--bind-address``: all addresses when nodes reach it from network
    #: namespaces of their own (the sandbox's Cilium network), loopback otherwise
    bind_address: str = "127.0.0.1"
    #: kube-apiserver's ``--service-cluster-ip-range`` (the sandbox's with kube-proxy is its own,
    #: :mod:`devtools.sandbox.service_range`)
    service_cidr: str = SERVICE_CIDR


class LocalCluster(Supervisor):
    """One local cluster under ``folder``; ``start()`` returns once every component is ready."""

    def __init__(self, folder: Path, options: ClusterOptions | None = None, *, bin_dir: Path | None = None) -> None:
        self.folder = folder.resolve()
        self.options = options or ClusterOptions()
        self._bin = bin_dir
        super().__init__(self.folder / "logs")
        self.pki = PKI(self.folder / "pki")
        self.etcd_port = self.apiserver_port = 0
        self.admin_kubeconfig = self.folder / "admin.kubeconfig"
        self.audit_log = self.folder / "audit.jsonl"

    # --- public ---------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def bin_dir(self) -> Path:
        if self._bin is None:
            self._bin = find_bin_dir()
        return self._bin

    def start(self, timeout: float = 120.0) -> LocalCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "logs").mkdir(exist_ok=True)
        self._prepare()
        self.start_all(timeout)
        # as kubeadm at init: the API server's kubelet client may use every kubelet API (logs,
        # exec, port-forward) on kubelets that authorise by webhook
        create_all(self.admin_kubeconfig, [KUBELET_API_ADMIN_BINDING])
        return self

    def kubeconfig_for(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as ``user`` (in ``groups``) with a client certificate."""
        pair = self.pki.issue(path.stem, user, groups=groups)
        return self.pki.kubeconfig(path, self.server, user, pair=pair)

    def token_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        return self.pki.kubeconfig(path, self.server, user, token=token)

    def admin_ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        admin = self.pki.issue("admin", "kubernetes-admin", groups=("system:masters",))
        ctx.load_cert_chain(str(admin.cert), str(admin.key))
        return ctx

    def get(self, path: str, timeout: float = 10.0) -> Any:
        """GET a path of the API server as the admin (JSON decoded)."""
        with urllib.request.urlopen(
            self.server + path,
            timeout=timeout,  # a loopback URL
            context=self.admin_ssl_context(),
        ) as resp:
            return json.loads(resp.read())

    def audit_events(self) -> list[dict[str, Any]]:
        """The API server's audit events so far (``audit.k8s.io/v1`` Event objects)."""
        if not self.audit_log.exists():
            return []
        out = []
        for line in self.audit_log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written
                continue
        return out

    # --- set-up ---------------------------------------------------------------------

    def _prepare(self) -> None:
        opts = self.options
        b = self.bin_dir
        if not self.etcd_port:
            self.etcd_port, self.apiserver_port = free_port(), free_port()
            self._peer_port, self._kcm_port, self._sched_port = free_port(), free_port(), free_port()
        pki = self.pki
        pki.ensure_ca()
        pki.ensure_service_account_keys()
        kubernetes_service = str(ipaddress.ip_network(opts.service_cidr)[1])
        serving = pki.issue(
            "apiserver", "kube-apiserver", server_names=(*SERVING_NAMES, kubernetes_service), client=False
        )
        kubelet_client = pki.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", groups=("kubeadm:cluster-admins",)
        )
        admin = pki.issue("admin", "kubernetes-admin", groups=("system:masters",))
        pki.kubeconfig(self.admin_kubeconfig, self.server, "kubernetes-admin", pair=admin)

        etcd_dir = self.folder / "etcd"
        etcd = [
            b / "etcd",
            "--name",
            "local",
            "--data-dir",
            etcd_dir,
            "--listen-client-urls",
            self.etcd_url,
            "--advertise-client-urls",
            self.etcd_url,
            "--listen-peer-urls",
            f"http://127.0.0.1:{self._peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{self._peer_port}",
            "--initial-cluster",
            f"local=http://127.0.0.1:{self._peer_port}",
            "--listen-metrics-urls",
            f"http://127.0.0.1:{free_port()}",
            "--log-level",
            "warn",
            "--quota-backend-bytes",
            str(4 << 30),
        ]
        if opts.unsafe_no_fsync:
            etcd.append("--unsafe-no-fsync")
        self.add("etcd", etcd, http_ready(f"{self.etcd_url}/health"))

        api = [
            b / "kube-apiserver",
            "--etcd-servers",
            self.etcd_url,
            "--bind-address",
            opts.bind_address,
            "--advertise-address",
            "127.0.0.1",
            "--secure-port",
            str(self.apiserver_port),
            "--tls-cert-file",
            serving.cert,
            "--tls-private-key-file",
            serving.key,
            "--client-ca-file",
            pki.ca.cert,
            # the aggregation layer's front-proxy trust (components read it from the
            # extension-apiserver-authentication ConfigMap and complain when it is missing)
            "--requestheader-client-ca-file",
            pki.ca.cert,
            "--requestheader-allowed-names",
            "front-proxy-client",
            "--requestheader-username-headers",
            "X-Remote-User",
            "--requestheader-group-headers",
            "X-Remote-Group",
            "--requestheader-extra-headers-prefix",
            "X-Remote-Extra-",
            "--service-account-issuer",
            ISSUER,
            "--service-account-key-file",
            pki.sa_public,
            "--service-account-signing-key-file",
            pki.sa_private,
            "--service-cluster-ip-range",
            opts.service_cidr,
            "--authorization-mode",
            "Node,RBAC",
            "--enable-admission-plugins",
            "NodeRestriction",
            "--kubelet-client-certificate",
            kubelet_client.cert,
            "--kubelet-client-key",
            kubelet_client.key,
            # as kubeadm: nodes are reached at their address, not a host name to resolve
            "--kubelet-preferred-address-types",
            "InternalIP,ExternalIP,Hostname",
            "--allow-privileged=true",
            "--profiling=false",
            "--v",
            "1",
        ]
        if opts.token_auth_file is not None:
            api += ["--token-auth-file", opts.token_auth_file]
        if opts.audit_policy is not None:
            policy = self.folder / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(opts.audit_policy))
            api += [
                "--audit-policy-file",
                policy,
                "--audit-log-path",
                self.audit_log,
                "--audit-log-format",
                "json",
                "--audit-log-maxsize",
                "0",
            ]
        if opts.compaction_interval:
            api += ["--etcd-compaction-interval", opts.compaction_interval]
        if opts.encryption_config is not None:
            enc = self.folder / "encryption-config.yaml"
            enc.write_text(yaml.safe_dump(opts.encryption_config))
            enc.chmod(0o600)
            api += ["--encryption-provider-config", enc]
        if opts.feature_gates:
            api += ["--feature-gates", _gates(opts.feature_gates)]
        api += opts.apiserver_args
        # ready once /readyz says so: RBAC's bootstrap roles and the other post-start hooks done
        self.add("kube-apiserver", api, http_ready(f"{self.server}/readyz", ca_file=pki.ca.cert))

        if opts.run_controller_manager:
            kcm_kc = self.kubeconfig_for(
                self.folder / "kube-controller-manager.kubeconfig", "system:kube-controller-manager"
            )
            kcm = [
                b / "kube-controller-manager",
                "--kubeconfig",
                kcm_kc,
                "--authentication-kubeconfig",
                kcm_kc,
                "--authorization-kubeconfig",
                kcm_kc,
                "--use-service-account-credentials",
                "--leader-elect=false",
                "--service-account-private-key-file",
                pki.sa_private,
                "--root-ca-file",
                pki.ca.cert,
                "--cluster-signing-cert-file",
                pki.ca.cert,
                "--cluster-signing-key-file",
                pki.ca.key,
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(self._kcm_port),
                "--concurrent-gc-syncs",
                "5",
                "--v",
                "1",
            ]
            if opts.feature_gates:
                kcm += ["--feature-gates", _gates(opts.feature_gates)]
            kcm += opts.controller_manager_args
            self.add("kube-controller-manager", kcm, _healthz(self._kcm_port))

        if opts.run_scheduler:
            self._add_scheduler()

    def _add_scheduler(self) -> None:
        opts, b = self.options, self.bin_dir
        sched_kc = self.kubeconfig_for(self.folder / "kube-scheduler.kubeconfig", "system:kube-scheduler")
        config = dict(
            opts.scheduler_config
            or {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
        )
        # its own kubeconfig; the configuration's client rate (qps, burst) stays as given
        config["clientConnection"] = {**(config.get("clientConnection") or {}), "kubeconfig": str(sched_kc)}
        config["leaderElection"] = {"leaderElect": False}
        cfg = self.folder / "kube-scheduler-config.yaml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        sched = [
            b / "kube-scheduler",
            "--config",
            cfg,
            "--authentication-kubeconfig",
            sched_kc,
            "--authorization-kubeconfig",
            sched_kc,
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(self._sched_port),
            "--v",
            "1",
        ]
        if opts.feature_gates:
            sched += ["--feature-gates", _gates(opts.feature_gates)]
        self.add("kube-scheduler", sched, _healthz(self._sched_port))

    def start_scheduler(self, config: dict[str, Any], timeout: float = 120.0) -> None:
        """Start kube-scheduler with ``config`` on a running cluster (once what it calls, an
        extender say, answers).

        Its serving port is picked now, not with the cluster's: a picked port is only held once
        bound, and in the minutes between the two another run on this machine may take it. A
        port found taken all the same is picked again, once."""
        self.options.scheduler_config = config
        for attempt in range(2):
            self._sched_port = free_port()
            self._add_scheduler()
            try:
                self.bring_up("kube-scheduler", timeout)
                return
            except ProcessFailed as exc:
                if attempt or "address already in use" not in str(exc):
                    raise
                log.warning("kube-scheduler: port %d was taken meanwhile; another", self._sched_port)


def _healthz(port: int) -> ReadyCheck:
    """A control-plane component's own HTTPS ``/healthz`` (its throw-away serving certificate)."""
    return http_ready(f"https://127.0.0.1:{port}/healthz", self_signed=True)


def _gates(gates: dict[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


__all__ = ["ClusterOptions", "LocalCluster", "Pair", "free_port"]
