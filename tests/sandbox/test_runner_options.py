"""The sandbox runner's options that need no running sandbox: API replicas need a database
they can share, kube-apiserver's compaction interval reaches its command line, Kueue runs on
the sandbox's own cluster only, a cluster's state made for another queueing is not reused,
``--install helm`` gives the chart's services the queueing and the nodes' instance type, and
installs by docs/deploy.md's steps with settings of its own for exactly the page's settings."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.processes import Supervisor
from devtools.sandbox import chart_install, deploy_steps, identities, product, runner
from devtools.sandbox.chart_install import values_of_run
from devtools.sandbox.cluster import cluster_mode, local_cluster
from devtools.sandbox.nodes import GPU_NODE_LABELS, NodePaths
from devtools.sandbox.service_range import ServiceRange
from devtools.sandbox.settings import SandboxSettings
from devtools.sandbox.tls import ensure_self_signed
from gpucaas import chart


@pytest.mark.parametrize("database_url", [None, "sqlite:///x.db"])
def test_several_api_replicas_need_a_shared_database(tmp_path: Path, database_url: str | None) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        runner.start(tmp_path / "state", api_replicas=2, database_url=database_url)
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_the_compaction_interval_reaches_kube_apiserver(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, ClusterOptions(compaction_interval="10s", audit_policy=None), bin_dir=tmp_path / "bin"
    )
    cluster._prepare()
    args = cluster.children["kube-apiserver"].args
    assert args[args.index("--etcd-compaction-interval") + 1] == "10s"


@pytest.mark.parametrize(
    ("options", "message"),
    [({"queueing": "fifo"}, "use none or kueue"), ({"queueing": "kueue", "kubeconfig": Path("k")}, "own cluster")],
    ids=["unknown", "given-cluster"],
)
def test_a_queueing_the_sandbox_cannot_run_is_refused(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        runner.start(tmp_path / "state", **options)
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_a_cluster_state_of_another_queueing_starts_empty(tmp_path: Path) -> None:
    """Kueue's webhook configurations stay in etcd: a run without Kueue must not meet them."""
    said: list[str] = []
    etcd = tmp_path / "cluster" / "etcd"
    local_cluster(tmp_path, (), cluster_mode("device-plugin", "kueue"), said.append)
    etcd.mkdir()
    local_cluster(tmp_path, (), cluster_mode("device-plugin", "kueue"), said.append)
    assert etcd.exists() and not said  # the same mode keeps its state
    local_cluster(tmp_path, (), cluster_mode("device-plugin", "none"), said.append)
    assert not etcd.exists()
    assert said == [
        "the cluster's state is from the mode 'device-plugin, queueing kueue': starting it empty for 'device-plugin'"
    ]


def test_the_helm_install_queues_by_kueue_on_the_nodes_instance_type() -> None:
    objects = chart.render(values_of_run("t", "sha256:" + "0" * 64, "device-plugin", "kueue"))

    def env(deployment: str) -> dict[str, str]:
        (container,) = chart.pod_spec(chart.find(objects, "Deployment", deployment))["containers"]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert env("gpucaas-api")["GPUCAAS_QUEUEING"] == "kueue"
    controller = env("gpucaas-controller")
    assert controller["GPUCAAS_CONTROLLER_QUEUEING"] == "kueue"
    assert controller["GPUCAAS_CONTROLLER_GPU_INSTANCE_TYPE"] == GPU_NODE_LABELS["node.kubernetes.io/instance-type"]


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_the_extenders_service_has_the_address_the_shipped_scheduler_configuration_calls(
    mode: str, tmp_path: Path
) -> None:
    """kube-scheduler runs deploy/scheduler's configuration unchanged: the run's values give the
    extender's Service the fixed ClusterIP and port its urlPrefix names."""
    run_values = tmp_path / "values-run.yaml"
    chart_install.write_values(run_values, values_of_run("t", "sha256:" + "0" * 64, mode))
    rendered = chart_install.helm(
        tmp_path / "no-kubeconfig",
        *("template", chart_install.RELEASE, str(chart_install.CHART), "-n", chart_install.NAMESPACE),
        *("-f", str(chart_install.SANDBOX_VALUES), "-f", str(run_values)),
    )
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    service = chart.find(objects, "Service", "gpucaas-scheduler-extender")["spec"]
    (extender,) = product.shipped_scheduler_config(mode)["extenders"]
    assert extender["urlPrefix"] == f"http://{service['clusterIP']}:{service['ports'][0]['port']}"
    assert service["clusterIP"] == "10.96.0.88"


def test_a_commit_tag_that_reads_as_a_number_reaches_helm_as_a_string(tmp_path: Path) -> None:
    """Helm's YAML 1.2 parser reads the tag ``9691345789e1`` as a number, which the chart's schema
    refuses (image.tag is a string): the run's values file keeps it a string."""
    run_values = tmp_path / "values-run.yaml"
    chart_install.write_values(run_values, values_of_run("9691345789e1", "sha256:" + "0" * 64))
    rendered = chart_install.helm(
        tmp_path / "no-kubeconfig",
        *("template", chart_install.RELEASE, str(chart_install.CHART), "-n", chart_install.NAMESPACE),
        *("-f", str(chart_install.SANDBOX_VALUES), "-f", str(run_values)),
    )
    assert "ghcr.io/gpucaas/gpucaas@sha256:" + "0" * 64 in rendered


@pytest.mark.parametrize(
    ("given", "demo", "settled"),
    [
        ({}, False, ("helm", "kueue")),
        ({"kubeconfig": Path("k")}, False, ("processes", "none")),
        ({}, True, ("processes", "none")),
        ({"network": "cilium"}, False, ("processes", "kueue")),
        ({"install": "processes"}, False, ("processes", "kueue")),
        ({"queueing": "none"}, False, ("helm", "none")),
        ({"install": "helm", "queueing": "kueue"}, True, ("helm", "kueue")),
        ({"install": "none"}, False, ("none", "kueue")),
    ],
    ids=[
        "own-cluster",
        "given-cluster",
        "demo",
        "cilium",
        "processes-asked",
        "no-queue-asked",
        "demo-asked-for-both",
        "none-asked",
    ],
)
def test_make_sandbox_installs_the_chart_and_queues_by_kueue_where_it_can(
    monkeypatch: pytest.MonkeyPatch, given: dict, demo: bool, settled: tuple[str, str]
) -> None:
    """What `gpucaas sandbox` runs when an option is not given: the chart and Kueue on its own
    cluster and bridge network; what was asked for, always."""
    for name in ("INSTALL", "QUEUEING", "NETWORK", "KUBECONFIG"):
        monkeypatch.delenv(f"GPUCAAS_SANDBOX_{name}", raising=False)
    settings = SandboxSettings(**given)
    settings.settle_defaults(demo)
    assert (settings.install, settings.queueing) == settled


@pytest.mark.parametrize(
    ("mode", "node_daemon"), [("device-plugin", "device-plugin"), ("dra", "dra-driver")], ids=["device-plugin", "dra"]
)
def test_the_sandbox_mints_an_identity_for_each_process_it_runs_and_no_other(mode: str, node_daemon: str) -> None:
    """Each identity is one the sandbox's RBAC check waits to hear from: one no process runs as
    (helm test's, the migration hook's) would make every start wait out that check."""
    objects = identities.cluster_side(identities.sandbox_values(mode))
    assert sorted(identities.service_accounts(objects)) == sorted(
        ["api", "controller", node_daemon, "fabric", "scheduler-extender"]
    )


@pytest.mark.parametrize("options", [{"kubeconfig": Path("k")}, {"network": "cilium"}], ids=["given-cluster", "cilium"])
@pytest.mark.parametrize("install", ["helm", "none"])
def test_the_chart_installs_on_the_sandboxs_own_cluster_and_bridge_network_only(
    tmp_path: Path, install: str, options: dict
) -> None:
    with pytest.raises(ValueError, match="own cluster, on the bridge network"):
        runner.start(tmp_path / "state", install=install, **options)
    assert not (tmp_path / "state").exists()  # refused before anything started


def test_the_deploy_pages_steps_are_marked_in_order_and_are_bash() -> None:
    """Settings first, then the steps the sandbox runs; each parses as bash, and reads no variable
    but the settings (and its own loop's)."""
    blocks = deploy_steps.blocks()
    assert [b.name for b in blocks] == ["settings", "secrets", "chart", "admin-token", "check", "gpu-nodes"]
    names = set(deploy_steps.setting_names())
    for block in blocks:
        parsed = subprocess.run(["bash", "-n", "-c", block.script], capture_output=True, text=True, check=False)
        assert parsed.returncode == 0, (block.name, parsed.stderr)
        assert set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", block.script)) <= names | {"node"}, block.name


def test_the_sandbox_sets_exactly_the_pages_settings_and_a_shell_reads_them_back(tmp_path: Path) -> None:
    tls = ensure_self_signed(tmp_path / "tls")
    sandbox = runner.Sandbox(
        tmp_path, Supervisor(tmp_path / "logs"), "https://127.0.0.1:1", tmp_path / "kubeconfig", tls, "gca_it's"
    )
    sandbox.nodes = [NodePaths("gpu-node-a", tmp_path / "a"), NodePaths("gpu-node-b", tmp_path / "b")]
    sandbox.service_range = ServiceRange(1)
    files = [chart_install.SANDBOX_VALUES, tmp_path / "helm" / "values-run.yaml"]
    settings = chart_install.deploy_settings(sandbox, chart_install.ChartRelease(), files)
    written = deploy_steps.write_settings(tmp_path / "helm" / chart_install.DEPLOY_SETTINGS, settings)
    assert written.stat().st_mode & 0o777 == 0o600  # it holds the admin token and the database URL
    names = deploy_steps.setting_names()
    echo = "; ".join(f'printf "%s\\0" "${name}"' for name in names)
    read = subprocess.run(
        ["bash", "-euc", f". {written}; {echo}"], capture_output=True, text=True, check=True
    ).stdout.split("\0")[:-1]
    assert dict(zip(names, read, strict=True)) == settings
    assert (
        settings["ADMIN_TOKEN_SECRET"]
        == yaml.safe_load(chart_install.SANDBOX_VALUES.read_text())["api"]["adminToken"]["existingSecret"]
    )
    assert settings["GPU_NODES"] == "gpu-node-a gpu-node-b"
    assert "@10.97.0.55:5432/" in settings["DATABASE_URL"]  # the PostgreSQL Service in the sandbox's range
    with pytest.raises(ValueError, match="settings are"):
        deploy_steps.write_settings(tmp_path / "other.sh", {**settings, "EXTRA": "x"})


def test_the_chart_steps_values_list_reaches_helm_as_files_in_order(tmp_path: Path) -> None:
    """docs/deploy.md's `--values "$VALUES"`: Helm splits the list at commas, later files winning."""
    run_values = tmp_path / "values-run.yaml"
    chart_install.write_values(run_values, values_of_run("t1", "sha256:" + "1" * 64))
    later = tmp_path / "values-later.yaml"
    chart_install.write_values(later, {"image": {"digest": "sha256:" + "2" * 64}})
    step = next(s for s in deploy_steps.steps() if s.name == "chart")
    (helm_command,) = [line for line in step.script.splitlines() if line.startswith("helm ")]
    assert '--values "$VALUES"' in helm_command
    rendered = chart_install.helm(
        tmp_path / "no-kubeconfig",
        *("template", chart_install.RELEASE, str(chart_install.CHART), "-n", chart_install.NAMESPACE),
        *("--values", f"{chart_install.SANDBOX_VALUES},{run_values},{later}"),
    )
    assert "ghcr.io/gpucaas/gpucaas@sha256:" + "2" * 64 in rendered
    assert "sha256:" + "1" * 64 not in rendered
    assert "/var/lib/gpucaas-sandbox/board/sys" in rendered  # values-sandbox.yaml's


def test_a_sandbox_beside_another_has_the_extender_at_the_same_offset_of_its_own_service_range(
    tmp_path: Path,
) -> None:
    """A second sandbox with kube-proxy has its own Service range (devtools.sandbox.service_range):
    the extender's Service and kube-scheduler's configuration both move to it."""
    services = ServiceRange(2)
    run_values = tmp_path / "values-run.yaml"
    chart_install.write_values(run_values, values_of_run("t", "sha256:" + "0" * 64, services=services))
    rendered = chart_install.helm(
        tmp_path / "no-kubeconfig",
        *("template", chart_install.RELEASE, str(chart_install.CHART), "-n", chart_install.NAMESPACE),
        *("-f", str(chart_install.SANDBOX_VALUES), "-f", str(run_values)),
    )
    service = chart.find([o for o in yaml.safe_load_all(rendered) if o], "Service", "gpucaas-scheduler-extender")
    assert service["spec"]["clusterIP"] == "10.98.0.88"
    (extender,) = chart_install.scheduler_config("device-plugin", services)["extenders"]
    assert extender["urlPrefix"] == "http://10.98.0.88:8888"
    # the API's webhooks reach this machine at the one address every pod of the sandbox reaches it at
    api = chart.find([o for o in yaml.safe_load_all(rendered) if o], "Deployment", "gpucaas-api")
    env = {e["name"]: e.get("value") for e in api["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["GPUCAAS_WEBHOOK_ALLOW_NETWORKS"]) == ["10.95.2.1/32"]
