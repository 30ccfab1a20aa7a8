"""A cluster of its own with Kueue's manager and its webhooks (:mod:`devtools.kueue`), for the
module: Kueue's CRDs, roles and webhook configurations stay on it, and the session's cluster is
reset to its set-up state after each test. Needs ``make kueue``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from core.kube import new_api_client
from devtools.kueue import Kueue
from devtools.local_cluster import ClusterOptions, LocalCluster


@dataclass
class Queued:
    cluster: LocalCluster
    kueue: Kueue
    core: client.CoreV1Api
    custom: client.CustomObjectsApi


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
