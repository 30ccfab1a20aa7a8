"""A cluster of its own with Kueue's manager and its webhooks (:mod:`devtools.kueue`), for the
module: Kueue's CRDs, roles and webhook configurations stay on it, and the session's cluster is
reset to its set-up state after each test. Needs ``make kueue``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from core import crds
from core.kube import new_api_client
from devtools.kueue import Kueue
from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.local_cluster.objects import RUNTIME_CLASS, create_all
from devtools.sandbox import identities
from gpucaas import chart
from tests.tenancy_controller.conftest import EXTRA_CRDS, MANIFESTS, ControllerThread, controller_settings


@dataclass
class Queued:
    cluster: LocalCluster
    kueue: Kueue
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    #: component (``api``, ``controller``, ``scheduler-extender``) -> a kubeconfig of its chart
    #: ServiceAccount (``controlled``)
    kubeconfigs: dict[str, Path] = field(default_factory=dict)


GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
#: The scheduling gate Kueue's pod webhook sets and lifts on admission.
GATE = "kueue.x-k8s.io/admission"
TIMEOUT = 60.0


def gates(q: Queued, name: str, namespace: str) -> list[str]:
    return [g.name for g in q.core.read_namespaced_pod(name, namespace).spec.scheduling_gates or []]


def workload(q: Queued, pod_name: str, namespace: str) -> dict[str, Any] | None:
    """The Workload Kueue made for a pod (the pod is its owner)."""
    uid = q.core.read_namespaced_pod(pod_name, namespace).metadata.uid
    items = q.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]
    return next((w for w in items if any(o["uid"] == uid for o in w["metadata"].get("ownerReferences", []))), None)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def create_tenancy(q: Queued, name: str, *, quota: int, guaranteed: int) -> None:
    body = {
        "apiVersion": crds.API_VERSION,
        "kind": "Tenancy",
        "metadata": {"name": name},
        "spec": {"gpuQuota": quota, "podQuota": 4, "guaranteedGpus": guaranteed},
    }
    q.custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, body)


def tenancy_ready(q: Queued, name: str) -> bool:
    tenancy = q.custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name)
    return (tenancy.get("status") or {}).get("phase") == "Ready"


def read(q: Queued, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """A Kueue object, or None when there is none."""
    try:
        if namespace:
            return q.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        return q.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def borrowed(q: Queued, cluster_queue: str) -> str | None:
    """The GPUs a ClusterQueue's admitted workloads borrow from the cohort, as Kueue counts them."""
    usage = ((read(q, "clusterqueues", cluster_queue) or {}).get("status") or {}).get("flavorsUsage") or []
    return next((r.get("borrowed") for f in usage for r in f["resources"] if r["name"] == "nvidia.com/gpu"), None)


def admitted(q: Queued, pod_name: str, namespace: str) -> bool:
    """The pod's Workload is Admitted and no gate is left (Kueue's topology gate goes too when the
    flavor has no topology)."""
    cond = condition(workload(q, pod_name, namespace), "Admitted")
    return bool(cond and cond["status"] == "True") and not gates(q, pod_name, namespace)


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queued]:
    base = tmp_path_factory.mktemp("kueue")
    # no kube-scheduler: admitted pods stay Pending, unscheduled (admission is Kueue's, not a node's);
    # no ServiceAccount admission, as in the session's cluster: a namespace and its pods at once
    cluster = LocalCluster(
        base / "cluster",
        ClusterOptions(
            unsafe_no_fsync=True,
            run_scheduler=False,
            audit_policy=None,
            apiserver_args=["--disable-admission-plugins=ServiceAccount"],
        ),
    )
    kueue = Kueue(cluster, base / "kueue")
    try:
        cluster.start()
        kueue.start()
        with new_api_client(cluster.admin_kubeconfig) as api:
            yield Queued(cluster, kueue, client.CoreV1Api(api), client.CustomObjectsApi(api))
    finally:
        kueue.stop()
        cluster.stop()


@pytest.fixture(scope="module")
def controller_overrides() -> dict[str, Any]:
    """Settings of the module's controller beyond the chart's (a module overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def controlled(
    queued: Queued, tmp_path_factory: pytest.TempPathFactory, controller_overrides: dict[str, Any]
) -> Iterator[Queued]:
    """``queued``'s cluster with the Tenancy CRD and the tenancy controller queueing by Kueue, as
    the chart installs it with ``queueing.mode: kueue``: under its ServiceAccount and the chart's
    RBAC (a right the chart lacks fails these tests); ``kubeconfigs`` has the API's too."""
    admin = queued.cluster.admin_kubeconfig
    extra = [yaml.safe_load((MANIFESTS / name).read_text()) for name in EXTRA_CRDS]
    # the chart in the controller's allocation mode (dra adds the claim templates' rights)
    allocation_mode = controller_overrides.get("allocation_mode", "device-plugin")
    objects = identities.cluster_side(identities.sandbox_values(allocation_mode, "kueue"))
    create_all(admin, [*crds.crd_manifests(), *extra, RUNTIME_CLASS, *objects])
    accounts = identities.service_accounts(objects)
    for component in ("api", "controller", "scheduler-extender"):
        queued.kubeconfigs[component] = identities.write_kubeconfig(
            admin,
            tmp_path_factory.mktemp(component) / "kubeconfig",
            f"system:serviceaccount:{chart.NAMESPACE}:{accounts[component]}",
            identities.mint_token(admin, chart.NAMESPACE, accounts[component]),
        )
    secrets_role = next(
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-tenant-secrets")
    )
    settings = controller_settings(
        queued.kubeconfigs["controller"],
        queueing="kueue",
        gpu_instance_type="hgx-h100-8",
        # as the chart sets them: the API's Secret rights in each tenant namespace
        api_service_account=f"{chart.NAMESPACE}/{accounts['api']}",
        api_secrets_cluster_role=secrets_role,
        **controller_overrides,
    )
    controller = ControllerThread(settings).start()
    try:
        yield queued
    finally:
        controller.stop()
