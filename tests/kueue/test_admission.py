"""Kueue admits plain pods by quota: of two 8-GPU pods on an 8-GPU ClusterQueue one is admitted
(its scheduling gates lifted) and the other waits, gated, until the first is gone; only tenancy
namespaces' pods are queued, and Kueue's objects convert between API versions through its webhook."""

from __future__ import annotations

from typing import Any

from core.crds import LABEL_TENANCY
from devtools.waiting import wait_for
from tests.kueue.conftest import GATE, GROUP, TIMEOUT, VERSION, Queued, admitted, condition, gates, workload

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"
NAMESPACE = "tenant-acme"


def _kueue_objects(q: Queued) -> None:
    q.core.create_namespace({"metadata": {"name": NAMESPACE, "labels": {LABEL_TENANCY: "acme"}}})
    q.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceflavors",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": "gpu-node"}},
    )
    quota = {"cpu": "64", "memory": "256Gi", GPU: "8"}
    q.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": "gpus"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [
                            {
                                "name": "gpu-node",
                                "resources": [{"name": r, "nominalQuota": v} for r, v in quota.items()],
                            }
                        ],
                    }
                ],
            },
        },
    )
    q.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        "localqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": "acme", "namespace": NAMESPACE},
            "spec": {"clusterQueue": "gpus"},
        },
    )


def _pod(name: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi", GPU: "8"}, "limits": {GPU: "8"}}
    return {
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "acme"}},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def _gates(q: Queued, name: str, namespace: str = NAMESPACE) -> list[str]:
    return gates(q, name, namespace)


def _admitted(q: Queued, pod_name: str) -> bool:
    return admitted(q, pod_name, NAMESPACE)


def _pending_for_quota(q: Queued, pod_name: str) -> dict[str, Any] | None:
    """The QuotaReserved=False condition of a pod's Workload that Kueue tried and could not fit."""
    cond = condition(workload(q, pod_name, NAMESPACE), "QuotaReserved")
    return cond if cond and cond["status"] == "False" and cond["reason"] == "Pending" else None


def _gone(q: Queued, name: str) -> bool:
    return not any(p.metadata.name == name for p in q.core.list_namespaced_pod(NAMESPACE).items)


def test_pods_are_admitted_within_the_cluster_queue_quota(queued: Queued) -> None:
    q = queued
    _kueue_objects(q)
    q.core.create_namespaced_pod(NAMESPACE, _pod("first"))
    # the webhook gates every queued pod at creation: nothing schedules it before Kueue admits it
    assert GATE in _gates(q, "first")
    wait_for(lambda: _admitted(q, "first"), TIMEOUT, what="the first pod admitted, its gate lifted")

    q.core.create_namespaced_pod(NAMESPACE, _pod("second"))
    pending = wait_for(lambda: _pending_for_quota(q, "second"), TIMEOUT, what="the second pod's Workload pending")
    assert GPU in pending["message"]
    assert GATE in _gates(q, "second")

    q.core.delete_namespaced_pod("first", NAMESPACE)
    wait_for(lambda: _gone(q, "first"), TIMEOUT, what="the first pod deleted (Kueue's finalizer lifted)")
    wait_for(lambda: _admitted(q, "second"), TIMEOUT, what="the second pod admitted once the quota is free")


def test_only_pods_in_tenancy_namespaces_are_queued(queued: Queued) -> None:
    q = queued
    q.core.create_namespace({"metadata": {"name": "tenant-bystander", "labels": {LABEL_TENANCY: "bystander"}}})
    q.core.create_namespace({"metadata": {"name": "not-a-tenancy"}})
    for namespace in ("tenant-bystander", "not-a-tenancy"):
        q.core.create_namespaced_pod(namespace, _pod("bystander"))
    assert GATE in _gates(q, "bystander", "tenant-bystander")
    left_alone = q.core.read_namespaced_pod("bystander", "not-a-tenancy")
    assert not left_alone.spec.scheduling_gates
    assert not left_alone.metadata.finalizers


def test_older_api_versions_convert_through_kueues_webhook(queued: Queued) -> None:
    """ClusterQueues are stored as v1beta2; reading one as v1beta1 goes through Kueue's ``/convert``."""
    q = queued
    spec = {
        "resourceGroups": [
            {"coveredResources": [GPU], "flavors": [{"name": "any", "resources": [{"name": GPU, "nominalQuota": "4"}]}]}
        ]
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": "converted"}, "spec": spec}
    q.custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", body)
    old = q.custom.get_cluster_custom_object(GROUP, "v1beta1", "clusterqueues", "converted")
    assert old["apiVersion"] == f"{GROUP}/v1beta1"
    assert old["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": GPU, "nominalQuota": "4"}]
