"""The Cohort ``gpucaas`` holds the GPUs nobody is guaranteed, and Kueue lends them: a tenancy
guaranteed nothing gets an 8-GPU container admitted while every guarantee is in use. The pool
follows the GPU nodes and the guarantees (a tenancy's deletion too), says when the guarantees
exceed the fleet, and the Cohort and the container classes' WorkloadPriorityClasses come back
when deleted.

A cluster of its own with Kueue (:mod:`devtools.kueue`, ``make kueue``), the controller under its
chart ServiceAccount; the GPU nodes are Node objects only (labelled as GPU Feature Discovery does,
no kubelet), and nothing schedules: Kueue's admission is what is checked."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from core import crds, kueue
from devtools.waiting import wait_for
from services.api.domain.pods import build_pod
from tests.kueue.conftest import (
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

INSTANCE_TYPE = "hgx-h100-8"


@pytest.fixture(scope="module")
def controller_overrides() -> dict[str, Any]:
    return {"post_events": True}  # the Warning Event when the guarantees exceed the fleet


def _gpu_node(q: Queued, name: str, gpus: int) -> None:
    labels = {"node.kubernetes.io/instance-type": INSTANCE_TYPE, kueue.GPU_COUNT_LABEL: str(gpus)}
    q.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels)))


def _pool(q: Queued) -> str | None:
    cohort = read(q, "cohorts", kueue.COHORT)
    if cohort is None:
        return None
    (gpus,) = cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    return str(gpus["nominalQuota"])


def _wait_pool(q: Queued, gpus: str, why: str) -> None:
    wait_for(lambda: _pool(q) == gpus, TIMEOUT, what=f"the cohort's pool at {gpus} GPUs ({why})")


def _submit(q: Queued, tenancy: str, gpus: int) -> str:
    pod = build_pod(
        container_id=f"c-{tenancy}",
        tenancy=tenancy,
        image="busybox",
        gpus=gpus,
        queue=kueue.LOCAL_QUEUE,
        finalizer=False,
    )
    q.core.create_namespaced_pod(crds.tenant_namespace(tenancy), pod)
    return str(pod["metadata"]["name"])


def _put_back(q: Queued, plural: str, name: str) -> dict[str, Any]:
    uid = (read(q, plural, name) or {})["metadata"]["uid"]
    q.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
    return wait_for(
        lambda: (obj := read(q, plural, name)) and obj["metadata"]["uid"] != uid and obj,
        TIMEOUT,
        what=f"{plural} {name} put back",
    )


def _exceeded(q: Queued) -> list[str]:
    """The messages of the Warning Events on the Cohort saying the guarantees exceed the fleet."""
    return [
        e.message
        for e in q.core.list_namespaced_event("default").items
        if e.reason == "GuaranteesExceedFleet" and e.involved_object.kind == "Cohort" and e.type == "Warning"
    ]


def test_the_cohort_lends_what_nobody_is_guaranteed_and_follows_the_fleet(controlled: Queued) -> None:
    q = controlled
    _gpu_node(q, "gpu-1", 8)
    _gpu_node(q, "gpu-2", 8)
    _wait_pool(q, "16", "two nodes of 8 GPUs, nothing guaranteed yet")
    create_tenancy(q, "g", quota=8, guaranteed=8)
    create_tenancy(q, "z", quota=8, guaranteed=0)
    for name in ("g", "z"):
        wait_for(lambda name=name: tenancy_ready(q, name), TIMEOUT, what=f"tenancy {name} Ready")
    _wait_pool(q, "8", "16 GPUs on two nodes, 8 guaranteed")

    # g uses its whole guarantee, so nothing of it is lent: z's 8 GPUs can come from the pool only
    g_pod = _submit(q, "g", 8)
    wait_for(lambda: admitted(q, g_pod, "tenant-g"), TIMEOUT, what="g's 8-GPU pod admitted on its guarantee")
    z_pod = _submit(q, "z", 8)
    wait_for(lambda: admitted(q, z_pod, "tenant-z"), TIMEOUT, what="z's 8-GPU pod admitted from the pool")
    wait_for(lambda: borrowed(q, "tenancy-z") == "8", TIMEOUT, what="z's 8 GPUs counted as borrowed")
    assert borrowed(q, "tenancy-g") in (None, "0")

    q.core.delete_node("gpu-2")
    _wait_pool(q, "0", "a node gone: 8 GPUs, all guaranteed")
    q.custom.patch_cluster_custom_object(
        crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "g", {"spec": {"guaranteedGpus": 2}}
    )
    _wait_pool(q, "6", "g's guarantee down to 2")

    # GPU Feature Discovery relabels the node with one GPU: guarantees beyond the fleet, said
    q.core.patch_node("gpu-1", {"metadata": {"labels": {kueue.GPU_COUNT_LABEL: "1"}}})
    _wait_pool(q, "0", "1 GPU, 2 guaranteed")
    says = "guaranteed 2 GPUs but the fleet has 1"
    wait_for(lambda: [m for m in _exceeded(q) if says in m], TIMEOUT, what="a GuaranteesExceedFleet Event")

    # drift: what every tenancy shares comes back, the Cohort with the pool as it is now
    _put_back(q, "cohorts", kueue.COHORT)
    _wait_pool(q, "0", "the Cohort put back")
    back = _put_back(q, "workloadpriorityclasses", kueue.INTERRUPTIBLE_CLASS)
    assert back["value"] == 0 and "interruptible" in back["description"]
    standard = read(q, "workloadpriorityclasses", kueue.STANDARD_CLASS)
    assert standard and standard["value"] == 1000

    # a deleted tenancy's guarantee goes back to the pool once the Tenancy is gone
    q.custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "g")
    _wait_pool(q, "1", "g deleted: nothing guaranteed on 1 GPU")
