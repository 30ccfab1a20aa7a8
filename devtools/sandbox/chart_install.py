"""The sandbox's third stage with ``--install helm``: the product installed with its chart, as a
platform team installs it, by docs/deploy.md's own steps (:mod:`.deploy_steps`), instead of as
processes on this machine.

In order, :func:`prepare_chart` (all that ``--install none`` does, leaving the steps to the
caller): the image of this work tree (``make image``, :mod:`devtools.image`) pushed to the
sandbox's public registry as ``ghcr.io/gpucaas/gpucaas:<tag>`` (the nodes' containerd sends
``ghcr.io`` there); the Services whose servers run on this machine made reachable from the pods
(:mod:`.host_services`: kube-apiserver, and PostgreSQL, standing for production's external one;
kube-proxy and the cluster DNS run already, :mod:`.service_network`); kube-scheduler with the
chart's scheduler configuration; the values files of the run (``deploy/helm/values-sandbox.yaml``
and ``helm/values-run.yaml``: the image's tag and digest, the fake boards' golden firmware, the
tenant volumes' StorageClass) and docs/deploy.md's settings for this sandbox
(``helm/deploy-settings.sh``). Then docs/deploy.md's steps, run with bash: the namespace and the
Secrets (the database's, the API's TLS and the admin token's, from the sandbox's own files),
``helm upgrade --install --wait``, the admin token read back, ``helm test``, the GPU nodes
labelled. Last, :func:`open_release`: every node's GPUs offered, and a forwarder from
``127.0.0.1:<api port>`` to the API's Service, so that the API keeps its URL.

kube-scheduler runs on this machine, as a kubeadm control plane's runs on its host's network, with
deploy/scheduler's configuration: it calls the extender at the fixed ClusterIP that file names,
moved to the sandbox's Service range (:mod:`.service_range`; the first sandbox's is the file's
own), and the run's values (:func:`values_of_run`) give the extender's Service that address;
kube-proxy carries the connection to the extender's pod, whichever pod that is after an upgrade.

The database is the host's PostgreSQL (``make postgres``), one database per state folder
(:mod:`.host_database`): the chart takes only a PostgreSQL URL (its migrations run once, from a hook Job, under
PostgreSQL's advisory lock), and an external PostgreSQL is what production runs.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools.local_cluster.binaries import bin_dir, binary
from devtools.local_cluster.objects import create_all
from devtools.processes import ANSWERING, http_ready
from devtools.sandbox import deploy_steps, host_database, hostpath_volumes
from devtools.sandbox.host_services import Forwarder, HostService, HostServices
from devtools.sandbox.node_daemons import node_offers_gpus, published_slices
from devtools.sandbox.product import scheduler_config as product_scheduler_config, shipped_scheduler_config
from devtools.sandbox.queueing import chart_values as queueing_values
from devtools.sandbox.service_range import ServiceRange
from devtools.waiting import wait_for

if TYPE_CHECKING:
    from devtools.image import BuiltImage
    from devtools.sandbox.runner import Plan, Sandbox

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpucaas"
SANDBOX_VALUES = REPO / "deploy" / "helm" / "values-sandbox.yaml"
RELEASE = "gpucaas"
NAMESPACE = "gpucaas-system"
#: the chart's image repository, under the registry name the sandbox's public registry serves
IMAGE_REGISTRY = "ghcr.io"
IMAGE_REPOSITORY = "gpucaas/gpucaas"
POSTGRES_SERVICE = "gpucaas-postgres"
#: where the Services standing for this machine's servers are, the ``kubernetes`` one's namespace
#: (outside the product's, which docs/deploy.md's steps create)
HOST_SERVICES_NAMESPACE = "default"
#: the Service standing for the host's PostgreSQL (a fixed address in the first Service range's
#: static band, moved to the sandbox's range)
POSTGRES_SERVICE_IP = "10.96.0.55"
POSTGRES_PORT = host_database.PORT
#: the admin token's Secret that values-sandbox.yaml names (``api.adminToken.existingSecret``)
ADMIN_TOKEN_SECRET = "gpucaas-sandbox-admin-token"
#: docs/deploy.md's settings for this sandbox, in ``<state>/helm/``
DEPLOY_SETTINGS = "deploy-settings.sh"
HELM_TIMEOUT = "10m"
#: the Service range of a sandbox that runs alone (the shipped files' addresses as they are)
FIRST_RANGE = ServiceRange(0)


@dataclass(frozen=True)
class ChartRelease:
    """What the release is made of: a chart folder, its sandbox values file, the image (the one
    built from this work tree when none is given) and values of the caller's (another ``-f``
    file, last, so that they win). ``benchmarks.upgrade`` installs an earlier commit's."""

    chart: Path = CHART
    sandbox_values: Path = SANDBOX_VALUES
    image: BuiltImage | None = None
    values: dict[str, Any] = field(default_factory=dict)


def install_chart(sandbox: Sandbox, plan: Plan) -> None:
    """The chart installed by docs/deploy.md's steps on the prepared cluster, and opened."""
    prepare_chart(sandbox, plan)
    deploy_steps.run(sandbox.state_dir / "helm" / DEPLOY_SETTINGS, sandbox.kubeconfig, bin_dir(), plan.say)
    open_release(sandbox, plan)


def prepare_chart(sandbox: Sandbox, plan: Plan) -> None:
    """All but docs/deploy.md's steps: the image pushed, the host's PostgreSQL and kube-apiserver
    reachable from the pods, kube-scheduler running, the values files and the steps' settings
    written (``helm/deploy-settings.sh``)."""
    say = plan.say
    assert sandbox.cluster is not None and sandbox.registries is not None
    release = sandbox.release = built(plan.release or ChartRelease(), say)
    push_image(sandbox, release, say)
    host_database.ensure(sandbox.state_dir)
    services = service_range_of(sandbox)
    say(
        f"making kube-apiserver (the kubernetes Service, {services.kubernetes}) and the host's PostgreSQL "
        f"({HOST_SERVICES_NAMESPACE}/{POSTGRES_SERVICE}, {services.moved(POSTGRES_SERVICE_IP)}) reachable from the pods"
    )
    create_all(sandbox.kubeconfig, [postgres_service(services)])
    forwarders = sandbox.host_services = HostServices(
        sandbox.kubeconfig,
        [
            HostService(HOST_SERVICES_NAMESPACE, "kubernetes", "https", sandbox.cluster.apiserver_port),
            HostService(HOST_SERVICES_NAMESPACE, POSTGRES_SERVICE, "postgres", POSTGRES_PORT),
        ],
        [real.gateway for real in sandbox.real_nodes.values()],
    )
    forwarders.start()
    config = scheduler_config(plan.allocation_mode, services)
    sandbox.extender_url = extender_url(config)
    say(
        f"starting kube-scheduler with deploy/scheduler's configuration (its extender at {sandbox.extender_url}, "
        "in the sandbox's Service range)"
    )
    sandbox.cluster.start_scheduler(config)
    settings = deploy_steps.write_settings(
        sandbox.state_dir / "helm" / DEPLOY_SETTINGS,
        deploy_settings(sandbox, release, values_files(sandbox, release, plan.queueing)),
    )
    say(f"docs/deploy.md's settings for this sandbox: {settings}")


def deploy_settings(sandbox: Sandbox, release: ChartRelease, files: list[Path]) -> dict[str, str]:
    """docs/deploy.md's settings, the sandbox's: its chart and values files, the host's
    PostgreSQL, its ``tls/`` files and ``admin-token``, its GPU nodes; no Redis (one API replica
    counts its rates alone)."""
    tls = sandbox.tls
    return {
        "CHART": str(release.chart),
        "VALUES": ",".join(map(str, files)),
        "DATABASE_URL": host_database.url(sandbox.state_dir, service_range_of(sandbox).moved(POSTGRES_SERVICE_IP)),
        "RATE_LIMITS_URL": "",
        "API_TLS_CERT": str(tls.cert),
        "API_TLS_KEY": str(tls.key),
        "API_TLS_CA": str(tls.ca_cert),
        "ADMIN_TOKEN": sandbox.admin_token,
        "ADMIN_TOKEN_SECRET": ADMIN_TOKEN_SECRET,
        "GPU_NODES": " ".join(node.name for node in sandbox.nodes),
    }


def service_range_of(sandbox: Sandbox) -> ServiceRange:
    assert sandbox.service_range is not None, "the chart is installed on a sandbox with a Service range of its own"
    return sandbox.service_range


def scheduler_config(allocation_mode: str, services: ServiceRange) -> dict[str, Any]:
    """deploy/scheduler's configuration for the mode, the extender's fixed ClusterIP moved to
    ``services`` (the same address in the first range)."""
    url = urllib.parse.urlsplit(extender_url(shipped_scheduler_config(allocation_mode)))
    assert url.hostname is not None
    moved = url._replace(netloc=f"{services.moved(url.hostname)}:{url.port}").geturl()
    return product_scheduler_config(allocation_mode, moved)


def extender_url(config: dict[str, Any]) -> str:
    (extender,) = config["extenders"]
    return str(extender["urlPrefix"])


def open_release(sandbox: Sandbox, plan: Plan) -> None:
    """Once the release is installed: every node's GPUs offered, the API forwarded to this
    machine, the extender answering at its Service."""
    assert sandbox.release is not None and sandbox.release.image is not None and sandbox.extender_url is not None
    plan.say("waiting for the DaemonSets' pods on every GPU node, and for the node's GPUs offered")
    wait_nodes(sandbox)
    reference = image_reference(sandbox.release)
    sandbox.installed = (
        f"release {RELEASE} in {NAMESPACE}, image {reference}  (helm list -A; kubectl -n {NAMESPACE} get pods)"
    )
    forward_api(sandbox, plan.api_port)
    plan.say(f"waiting for the scheduler extender to answer at its Service ({sandbox.extender_url})")
    wait_for(
        http_ready(f"{sandbox.extender_url}/readyz"),
        300,
        interval=0.5,
        what="the scheduler extender Ready at its Service",
    )
    sandbox.api_urls.append(sandbox.api_url)


def release_deployed(kubeconfig: Path) -> bool:
    """Whether a revision of the release is ``deployed`` (Helm's record of it, a Secret of the namespace)."""
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        records = client.CoreV1Api(api).list_namespaced_secret(
            NAMESPACE, label_selector=f"owner=helm,name={RELEASE},status=deployed"
        )
    return bool(records.items)


def upgrade(sandbox: Sandbox, release: ChartRelease, queueing: str, say: Callable[[str], None]) -> str:
    """``helm upgrade`` of the installed release to ``release`` (its image built when none is
    given, and pushed first), with the sandbox's values files (docs/deploy.md's upgrade); returns
    the image's reference."""
    release = built(release, say)
    reference = push_image(sandbox, release, say)
    helm_install(sandbox, release, queueing, say)
    return reference


def built(release: ChartRelease, say: Callable[[str], None]) -> ChartRelease:
    """``release`` with its image: this work tree's, built, when it names none."""
    from devtools import image as product_image

    if release.image is not None:
        return release
    say("building the product's image (make image: the base is reused, the product layer is this work tree)")
    try:
        return replace(release, image=product_image.build())
    except product_image.ImageBuildFailed as exc:
        raise OSError(str(exc)) from exc


def helm_install(sandbox: Sandbox, release: ChartRelease, queueing: str, say: Callable[[str], None]) -> None:
    """``helm upgrade --install --wait`` of ``release`` (its image pushed) on an installed
    sandbox, then every node's GPUs offered."""
    files = values_files(sandbox, release, queueing)
    say(
        f"helm upgrade --install {RELEASE} {_shown(release.chart)} -n {NAMESPACE} "
        f"{' '.join(f'-f {_shown(f)}' for f in files)} --wait "
        "(the migration Job, then every Deployment and DaemonSet Ready)"
    )
    helm(sandbox.kubeconfig, *install_args(release.chart, files))
    wait_nodes(sandbox)


def values_files(sandbox: Sandbox, release: ChartRelease, queueing: str) -> list[Path]:
    """The release's values files, in Helm's order: its sandbox values, the run's
    (``helm/values-run.yaml``) and the caller's (``helm/values-caller.yaml``, when it has any)."""
    assert release.image is not None
    run_values = sandbox.state_dir / "helm" / "values-run.yaml"
    write_values(
        run_values,
        values_of_run(
            release.image.tag,
            release.image.digest,
            sandbox.allocation_mode,
            queueing,
            release.sandbox_values,
            service_range_of(sandbox),
        ),
    )
    files = [release.sandbox_values, run_values]
    if release.values:
        files.append(sandbox.state_dir / "helm" / "values-caller.yaml")
        write_values(files[-1], release.values)
    return files


def wait_nodes(sandbox: Sandbox) -> None:
    """Every DaemonSet pod Ready (Helm's ``--wait`` lets maxUnavailable of them lag) and every
    node's GPUs offered."""
    wait_for(lambda: daemonsets_ready(sandbox.kubeconfig), 300, interval=0.5, what="every DaemonSet pod Ready")
    offers = published_slices if sandbox.allocation_mode == "dra" else node_offers_gpus
    for node in sandbox.nodes:
        wait_for(offers(sandbox.kubeconfig, node.name), 120, interval=0.5, what=f"{node.name}'s GPUs")


def image_reference(release: ChartRelease) -> str:
    """The release's image as the nodes pull it (``ghcr.io``, which the sandbox's registry serves)."""
    assert release.image is not None
    return f"{IMAGE_REGISTRY}/{IMAGE_REPOSITORY}:{release.image.tag}"


def push_image(sandbox: Sandbox, release: ChartRelease, say: Callable[[str], None]) -> str:
    """The release's image copied to the sandbox's public registry, which serves ``ghcr.io``;
    its reference there."""
    assert sandbox.registries is not None and release.image is not None
    built = release.image
    reference = image_reference(release)
    say(f"pushing {reference} ({built.digest}) to the sandbox's registry, which serves {IMAGE_REGISTRY}")
    push = subprocess.run(
        [
            *("skopeo", "copy", "--quiet", "--dest-tls-verify=false"),
            built.reference,
            f"docker://{sandbox.registries.public.address}/{IMAGE_REPOSITORY}:{built.tag}",
        ],
        **_quiet(),
    )
    if push.returncode != 0:
        raise OSError(f"skopeo copy {built.reference}: {push.stderr.strip()}")
    return reference


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def daemonsets_ready(kubeconfig: Path) -> bool:
    """Whether every pod of the release's DaemonSets is Ready on every node they select."""
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        statuses = [d.status for d in client.AppsV1Api(api).list_namespaced_daemon_set(NAMESPACE).items]
    return bool(statuses) and all(
        s is not None and s.desired_number_scheduled and s.number_ready == s.desired_number_scheduled for s in statuses
    )


def install_args(chart: Path, values_files: list[Path]) -> list[str]:
    """``helm install`` (or, on a sandbox that has the release, ``helm upgrade``) of the chart."""
    return [
        *("upgrade", "--install", RELEASE, str(chart), "--namespace", NAMESPACE),
        *(arg for f in values_files for arg in ("-f", str(f))),
        *("--wait", "--timeout", HELM_TIMEOUT),
    ]


def helm(kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        [binary("helm"), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise OSError(f"helm {args[0]} failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    return result.stdout


def values_of_run(
    tag: str,
    digest: str,
    allocation_mode: str = "device-plugin",
    queueing: str = "none",
    sandbox_values: Path = SANDBOX_VALUES,
    services: ServiceRange = FIRST_RANGE,
) -> dict[str, Any]:
    """The run's values: the image built from this work tree, the fake boards' golden firmware,
    the StorageClass of tenant volumes on kube-controller-manager's HostPath provisioner, the
    allocation mode (``dra``: the DRA driver with binding conditions, as the sandbox's
    processes run it, and the lease agent's quick rounds of values-sandbox.yaml beside it), the
    queueing (``kueue``: ``queueing.mode``, Kueue running on this machine against the cluster)
    and the extender's Service at the address kube-scheduler's shipped configuration calls,
    moved to ``services``; the API's webhooks may reach this machine at the address every pod
    of the sandbox reaches it at (``webhook_allow_networks``, the range's ``host_address``: a
    tenant's receiver runs here, as the processes install lets it run on loopback), and no
    address of the pod network."""
    from devtools.fake_sysfs import GOLDEN_ROM_VERSION, H100_SXM5_DEVICE, golden_rom_sha256

    extender = urllib.parse.urlsplit(extender_url(scheduler_config(allocation_mode, services)))
    values: dict[str, Any] = {
        **hostpath_volumes.chart_values(),
        **queueing_values(queueing),
        "image": {"tag": tag, "digest": digest},
        "api": {
            "extraEnv": [
                {
                    "name": "GPUCAAS_WEBHOOK_ALLOW_NETWORKS",
                    "value": json.dumps([f"{services.host_address}/32"]),
                }
            ]
        },
        "schedulerExtender": {"service": {"clusterIP": extender.hostname}, "port": extender.port},
        "devicePlugin": {
            "firmware": {
                "golden": {H100_SXM5_DEVICE: {"sha256": [golden_rom_sha256()], "versions": [GOLDEN_ROM_VERSION]}}
            }
        },
    }
    if allocation_mode == "dra":
        lease_env = yaml.safe_load(sandbox_values.read_text())["devicePlugin"]["extraEnv"]
        values["allocation"] = {"mode": "dra"}
        values["draDriver"] = {
            "bindingConditions": True,
            "publishIntervalSeconds": 2,
            "extraEnv": [*lease_env, {"name": "GPUCAAS_DRA_BINDING_INTERVAL_S", "value": "0.5"}],
        }
    return values


def write_values(path: Path, values: dict[str, Any]) -> None:
    """A values file Helm reads as written: JSON, the subset of YAML in which every string is
    quoted (a commit tag such as ``9691345789e1`` is a number to Helm's YAML 1.2 parser, and
    PyYAML's 1.1 dumper leaves it bare)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=2) + "\n")


def _quiet() -> dict[str, Any]:
    return {"capture_output": True, "text": True, "check": False}


def postgres_service(services: ServiceRange) -> dict[str, Any]:
    """The Service standing for the host's PostgreSQL, the database URL's host: no selector, its
    backend is this machine's PostgreSQL (:mod:`.host_services` writes its EndpointSlice)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": POSTGRES_SERVICE, "namespace": HOST_SERVICES_NAMESPACE},
        "spec": {
            "clusterIP": services.moved(POSTGRES_SERVICE_IP),
            "ports": [{"name": "postgres", "port": POSTGRES_PORT, "protocol": "TCP"}],
        },
    }


def forward_api(sandbox: Sandbox, local_port: int) -> None:
    """The API's Service on ``127.0.0.1:local_port``: a forwarder to its ClusterIP, which this
    machine routes to kube-proxy (:mod:`.service_range`), as a load balancer in front of the
    Service would; it carries on across restarts of the API's pods and of the kubelets (a
    ``kubectl port-forward`` runs through one pod's kubelet and ends with either)."""
    from kubernetes import client

    from core.kube import new_api_client

    with new_api_client(sandbox.kubeconfig) as api:
        service = client.CoreV1Api(api).read_namespaced_service(f"{RELEASE}-api", NAMESPACE)
    spec = service.spec
    assert spec is not None and spec.cluster_ip and spec.ports
    address: str = spec.cluster_ip
    (port,) = [p.port for p in spec.ports if p.name == "https"]
    if sandbox.api_forwarder is not None:
        sandbox.api_forwarder.stop()
    sandbox.api_forwarder = Forwarder(("127.0.0.1", local_port), port, target_host=address)
    sandbox.api_forwarder.start()
    wait_for(
        http_ready(f"https://127.0.0.1:{local_port}/healthz", ca_file=sandbox.tls.ca_cert, statuses=ANSWERING),
        120,
        interval=0.5,
        what=f"the API answering through its Service ({address}:{port})",
    )


def release_status(kubeconfig: Path) -> dict[str, Any]:
    """``helm status`` of the release, as JSON."""
    return dict(json.loads(helm(kubeconfig, "status", RELEASE, "-n", NAMESPACE, "-o", "json")))
