"""The tenancy controller keeps each tenancy's Kueue objects (queueing=kueue), and Kueue admits by
them: a tenancy with no guarantee borrows another's idle guarantee; a LocalQueue deleted by hand
comes back; deleting a tenancy removes its ClusterQueue and LocalQueue.

A cluster of its own with Kueue (:mod:`devtools.kueue`, ``make kueue``), the Tenancy CRD and the
controller in a thread; no kube-scheduler, so an admitted pod stays Pending, ungated."""

from __future__ import annotations

from typing import Any

from core import crds, kueue
from devtools.waiting import wait_for
from services.api.domain.pods import build_pod
from tests.kueue.conftest import (
    GATE,
    GROUP,
    TIMEOUT,
    VERSION,
    Queued,
    admitted,
    borrowed,
    create_tenancy,
    read,
    tenancy_ready,
)

GPU = "nvidia.com/gpu"


def _gpu_limits(cluster_queue: dict[str, Any]) -> tuple[str, str, str]:
    (gpus,) = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    return gpus["nominalQuota"], gpus["borrowingLimit"], gpus["lendingLimit"]


def test_queues_follow_the_tenancies_and_a_tenancy_borrows_an_idle_guarantee(controlled: Queued) -> None:
    q = controlled
    create_tenancy(q, "a", quota=8, guaranteed=8)  # the whole 8 GPUs guaranteed, idle
    create_tenancy(q, "b", quota=8, guaranteed=0)  # nothing guaranteed, capped at 8
    for name in ("a", "b"):
        wait_for(lambda name=name: tenancy_ready(q, name), TIMEOUT, what=f"tenancy {name} Ready")
    cq_a, cq_b = read(q, "clusterqueues", "tenancy-a"), read(q, "clusterqueues", "tenancy-b")
    assert cq_a and cq_b and cq_a["spec"]["cohortName"] == cq_b["spec"]["cohortName"] == "gpucaas"
    assert _gpu_limits(cq_a) == ("8", "0", "8") and _gpu_limits(cq_b) == ("0", "8", "0")
    local = read(q, "localqueues", "default", "tenant-b")
    assert local and local["spec"]["clusterQueue"] == "tenancy-b"
    # Kueue holds the GPU cap: the quota no longer counts GPUs
    quota = q.core.read_namespaced_resource_quota("tenant-quota", "tenant-b")
    assert f"requests.{GPU}" not in quota.spec.hard

    # the API's own pod for an 8-GPU container, as it submits it with queueing=kueue
    pod = build_pod(container_id="c-b8", tenancy="b", image="busybox", gpus=8, queue=kueue.LOCAL_QUEUE, finalizer=False)
    name = pod["metadata"]["name"]
    created = q.core.create_namespaced_pod("tenant-b", pod)
    # Kueue's webhook gated it at creation: the object the create answered, as the webhook left it
    # (a read after it may already find the gate gone: b borrows an idle guarantee and is admitted at once)
    assert GATE in [g.name for g in created.spec.scheduling_gates or []]
    wait_for(lambda: admitted(q, name, "tenant-b"), TIMEOUT, what="b's 8-GPU pod admitted")
    # all 8 borrowed: a's guarantee, lent while a is idle
    wait_for(lambda: borrowed(q, "tenancy-b") == "8", TIMEOUT, what="b's 8 GPUs counted as borrowed")

    # drift: the LocalQueue deleted by hand comes back
    uid = local["metadata"]["uid"]
    q.custom.delete_namespaced_custom_object(GROUP, VERSION, "tenant-b", "localqueues", "default")
    back = wait_for(
        lambda: (lq := read(q, "localqueues", "default", "tenant-b")) and lq["metadata"]["uid"] != uid and lq,
        TIMEOUT,
        what="the LocalQueue put back",
    )
    assert back["spec"]["clusterQueue"] == "tenancy-b"

    # deletion: the tenancy's pods go, then its ClusterQueue and LocalQueue
    q.custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "b")
    wait_for(lambda: read(q, "clusterqueues", "tenancy-b") is None, TIMEOUT, what="ClusterQueue tenancy-b deleted")
    wait_for(lambda: read(q, "localqueues", "default", "tenant-b") is None, TIMEOUT, what="LocalQueue deleted")
    assert read(q, "clusterqueues", "tenancy-a") is not None  # the other tenancy's stays
