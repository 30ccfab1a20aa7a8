"""The sandbox's third stage, the product: the gpucaas services, each the real service started
through its own ``gpucaas <service>`` command as the sandbox's supervisor runs it.

In order: the tenancy and GPU lease controller (Kopf); per node its daemons
(:mod:`.node_daemons`); the scheduler extender, then kube-scheduler with the chart's scheduler
configuration for the allocation mode (own cluster only); the API replicas over HTTPS. Last,
on the sandbox's own cluster, a check that RBAC refused none of the processes' requests (each
runs as its chart ServiceAccount: a permission the chart lacks fails the start). The controller
and the API run with the sandbox's allocation mode and queueing (:mod:`.queueing`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devtools.ports import free_port
from devtools.processes import ANSWERING, http_ready
from devtools.real_node import cilium
from devtools.sandbox import identities, queueing
from devtools.sandbox.ingress import AUTH_ANNOTATIONS
from devtools.sandbox.node_daemons import start_node_daemons
from devtools.sandbox.services import start_service
from devtools.sandbox.tls import ENDPOINT_DOMAIN

if TYPE_CHECKING:
    from devtools.sandbox.runner import Plan, Sandbox

#: a container's share of a real node: this machine (2 CPUs, 24 GiB, no 1 GiB pages reserved)
#: stands in for an HGX server's 224 threads and 2 TiB, so an 8-GPU container and the
#: RuntimeClass's overhead (500m, 1 GiB) must fit in what it has
REAL_NODE_SIZING = {
    "GPUCAAS_CPU_PER_GPU": "150m",
    "GPUCAAS_MEMORY_PER_GPU": "2Gi",
    "GPUCAAS_SHM_PER_GPU": "256Mi",
    "GPUCAAS_KATA_HUGEPAGES": "false",
}
SCHEDULER_CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "scheduler"


def start_product(sandbox: Sandbox, plan: Plan) -> None:
    """Every gpucaas service, in the order they depend on each other."""
    start_controller(sandbox, plan)
    for node in sandbox.nodes:
        start_node_daemons(sandbox, plan, node)
    start_scheduling(sandbox, plan)
    start_api(sandbox, plan)
    if sandbox.audit_log is not None:
        plan.say("checking that RBAC refused none of the gpucaas processes")
        identities.check_no_refusals(sandbox.audit_log, sandbox.identities)


def kube_env(sandbox: Sandbox, process: str) -> dict[str, str]:
    kubeconfig = str(sandbox.kubeconfig_of(process))
    return {"GPUCAAS_KUBECONFIG": kubeconfig, "KUBECONFIG": kubeconfig}


def start_controller(sandbox: Sandbox, plan: Plan) -> None:
    plan.say("starting the tenancy and GPU lease controller")
    start_service(
        sandbox.supervisor,
        "controller",
        ["controller", "--standalone", "--kubeconfig", str(sandbox.kubeconfig_of("controller"))],
        env={
            **kube_env(sandbox, "controller"),
            "GPUCAAS_CONTROLLER_POD_SECURITY_LEVEL": tenant_pod_security_level(),
            "GPUCAAS_CONTROLLER_ALLOCATION_MODE": plan.allocation_mode,
            **queueing.controller_env(plan.queueing),
            **api_secret_rights(plan.chart_objects),
        },
        ready=None,
    )


def start_scheduling(sandbox: Sandbox, plan: Plan) -> None:
    """The scheduler extender, then (own cluster) kube-scheduler configured to call it."""
    port = free_port()
    sandbox.extender_url = f"http://127.0.0.1:{port}"
    plan.say("starting the scheduler extender")
    start_service(
        sandbox.supervisor,
        "scheduler-extender",
        extender_args(port, sandbox.kubeconfig_of("scheduler-extender")),
        # as the chart: in the DRA mode the extender only scores nodes (no bind verb)
        env={
            **kube_env(sandbox, "scheduler-extender"),
            **({"GPUCAAS_PLACEMENT_BIND": "false"} if plan.allocation_mode == "dra" else {}),
            **queueing.extender_env(plan.queueing),
        },
        ready=http_ready(f"{sandbox.extender_url}/healthz", statuses=ANSWERING),
    )
    if sandbox.cluster is not None:
        plan.say(
            "starting kube-scheduler with the chart's scheduler configuration ("
            + (
                "DynamicResources allocates the claims; the extender scores nodes)"
                if plan.allocation_mode == "dra"
                else "the extender filters, scores and binds GPU pods)"
            )
        )
        sandbox.cluster.start_scheduler(scheduler_config(plan.allocation_mode, sandbox.extender_url))


def extender_args(port: int, kubeconfig: Path) -> list[str]:
    """``gpucaas scheduler-extender``'s arguments: it serves on loopback ``port`` and reads the
    cluster with ``kubeconfig``."""
    return ["scheduler-extender", "--host", "127.0.0.1", "--port", str(port), "--kubeconfig", str(kubeconfig)]


def start_api(sandbox: Sandbox, plan: Plan) -> None:
    """``api_replicas`` API processes over one database, the first at ``api_url``."""
    database = plan.database_url or f"sqlite:///{sandbox.state_dir / 'gpucaas.db'}"
    tls = sandbox.tls
    for replica in range(plan.api_replicas):
        port = plan.api_port if replica == 0 else free_port()
        url = f"https://127.0.0.1:{port}"
        sandbox.api_urls.append(url)
        name = "api" if replica == 0 else f"api-{replica + 1}"
        plan.say(
            f"starting the API on {url}"
            + (f" (replica {replica + 1} of {plan.api_replicas})" if plan.api_replicas > 1 else "")
        )
        start_service(
            sandbox.supervisor,
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
                str(sandbox.kubeconfig_of("api")),
            ],
            # webhooks may reach receivers on this machine (docs/webhooks.md)
            env={
                **kube_env(sandbox, "api"),
                "GPUCAAS_ADMIN_TOKEN": sandbox.admin_token,
                "GPUCAAS_ALLOCATION_MODE": plan.allocation_mode,
                **queueing.api_env(plan.queueing),
                "GPUCAAS_WEBHOOK_ALLOW_LOOPBACK": "true",
                **(REAL_NODE_SIZING if sandbox.real_nodes else {}),
                "GPUCAAS_ENDPOINT_DOMAIN": ENDPOINT_DOMAIN,
                "GPUCAAS_ENDPOINT_AUTH_ANNOTATIONS": json.dumps(AUTH_ANNOTATIONS),
                # Traefik runs on this machine, outside the pod network: the nodes see it at HOST_ADDRESS
                **(
                    {"GPUCAAS_ENDPOINT_INGRESS_CIDRS": json.dumps([f"{cilium.HOST_ADDRESS}/32"])} if plan.cilium else {}
                ),
            },
            ready=http_ready(f"{url}/healthz", ca_file=tls.ca_cert, statuses=ANSWERING),
        )


def shipped_scheduler_config(allocation_mode: str) -> dict[str, Any]:
    """kube-scheduler's configuration as shipped for the mode
    (``deploy/scheduler/kube-scheduler-config[-dra].yaml``: its extender at the fixed ClusterIP
    of the extender's Service)."""
    name = "kube-scheduler-config-dra.yaml" if allocation_mode == "dra" else "kube-scheduler-config.yaml"
    return dict(yaml.safe_load((SCHEDULER_CONFIGS / name).read_text()))


def scheduler_config(allocation_mode: str, extender_url: str) -> dict[str, Any]:
    """The shipped configuration for the mode, its extender at ``extender_url``."""
    config = shipped_scheduler_config(allocation_mode)
    for extender in config.get("extenders") or []:
        extender["urlPrefix"] = extender_url
    return config


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
