"""`gpucaas sandbox --queueing kueue`: Kueue's manager runs against the sandbox's cluster, the
controller and the API queue by it, the cohort's pool is the node's GPUs (its
``nvidia.com/gpu.count``), and a 2-GPU container of a tenancy without a guarantee is admitted
from that pool by Kueue and runs to Succeeded on a real node.

One real node. Needs root and `make kueue`; run through /work/heavy (it starts a cluster and a
real node).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from rich.console import Console

from core import kueue
from core.kube import new_api_client
from devtools.kueue import manifests_dir
from devtools.local_cluster.binaries import bin_dir
from devtools.sandbox import runner
from devtools.sandbox.nodes import node_names
from devtools.sandbox.queueing import GPU_INSTANCE_TYPE
from devtools.sandbox.tenant_view import DEMO_TENANCY, print_banner
from devtools.waiting import wait_for
from tests.fixtures.sandbox import package_sandbox
from tests.kueue.conftest import condition


def _kueue_built() -> bool:
    try:
        manifests_dir(bin_dir())
    except RuntimeError:
        return False
    return (bin_dir() / "kueue").exists()


# CI (root, `make install` builds Kueue) never skips it
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and (os.geteuid() != 0 or not _kueue_built()), reason="needs root and make kueue"
)

#: the CUDA sample's stand-in: lists the container's /dev/vfio devices and exits 0
IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    with package_sandbox(request, "gpucaas-kueue-", nodes=node_names(1), queueing="kueue") as sb:
        yield sb


def _workload(custom: client.CustomObjectsApi, pod: Any) -> dict[str, Any] | None:
    """The Workload Kueue made for ``pod`` (the pod is its owner)."""
    items = custom.list_namespaced_custom_object(kueue.GROUP, kueue.VERSION, pod.metadata.namespace, "workloads")
    return next(
        (w for w in items["items"] if any(o["uid"] == pod.metadata.uid for o in w["metadata"]["ownerReferences"])),
        None,
    )


def test_the_sandbox_says_kueue_queues_the_containers(sandbox: runner.Sandbox) -> None:
    console = Console(record=True, width=300)
    print_banner(console, sandbox)
    assert "Kueue queues the containers" in console.export_text()


def test_a_tenants_container_is_admitted_from_the_pool_by_kueue_and_succeeds(sandbox: runner.Sandbox) -> None:
    assert sandbox.api("GET", f"/v1/admin/tenancies/{DEMO_TENANCY}")["guaranteed_gpus"] == 0
    created = sandbox.api("POST", "/v1/containers", {"image": IMAGE, "gpus": 2}, token=sandbox.tenant_token)
    cid = created["id"]
    seen: dict[str, Any] = {}

    def finished() -> dict[str, Any] | None:
        seen.update(sandbox.api("GET", f"/v1/containers/{cid}", token=sandbox.tenant_token))
        return dict(seen) if seen["status"] in ("Succeeded", "Failed") else None

    try:
        final = wait_for(finished, TIMEOUT, interval=0.5, what=f"container {cid} finished")
    except TimeoutError:
        events = sandbox.api("GET", f"/v1/containers/{cid}/events", token=sandbox.tenant_token)
        raise AssertionError(f"container {cid} did not finish: {seen}; its events: {events}") from None
    assert final["status"] == "Succeeded" and final["exit_code"] == 0, final

    with new_api_client(sandbox.kubeconfig) as api:
        pod = client.CoreV1Api(api).read_namespaced_pod(final["pod_name"], final["namespace"])
        custom = client.CustomObjectsApi(api)
        workload = _workload(custom, pod)
        cohort = custom.get_cluster_custom_object(kueue.GROUP, kueue.VERSION, "cohorts", kueue.COHORT)
    # the pool: the one node's 8 GPUs, nobody guaranteed any
    (pool,) = cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert (pool["name"], str(pool["nominalQuota"])) == ("nvidia.com/gpu", "8"), cohort["spec"]
    assert pod.metadata.labels[kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    assert workload is not None, f"no Workload owned by {pod.metadata.name}"
    # admitted through the tenancy's ClusterQueue on the GPU nodes' flavor, then finished
    assert (condition(workload, "Admitted") or {}).get("status") == "True", workload.get("status")
    assert (condition(workload, "Finished") or {}).get("status") == "True", workload.get("status")
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert workload["status"]["admission"]["clusterQueue"] == kueue.cluster_queue_name(DEMO_TENANCY)
    assert assignment["flavors"] == {"nvidia.com/gpu": GPU_INSTANCE_TYPE}
    assert assignment["resourceUsage"] == {"nvidia.com/gpu": "2"}
    # Kueue lifted its gates and gave the pod the flavor's node selector
    assert not pod.spec.scheduling_gates
    assert pod.spec.node_selector["node.kubernetes.io/instance-type"] == GPU_INSTANCE_TYPE
