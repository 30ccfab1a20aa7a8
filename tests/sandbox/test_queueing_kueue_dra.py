"""`gpucaas sandbox --allocation-mode dra --queueing kueue`: in the DRA mode Kueue counts a
container's GPUs as in the device-plugin mode. The DRA driver advertises the node's 8 GPUs as
``nvidia.com/gpu`` in its capacity, the API's pod requests ``nvidia.com/gpu: 4`` beside its
claim, Kueue reserves 4 GPUs of the tenancy's ClusterQueue for it, and kube-scheduler's DRA
allocator gives it a whole 4-GPU partition on the real node, where it runs to Succeeded.

One real node. Needs root and `make kueue`; run through /work/heavy (it starts a cluster and a
real node).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kubernetes import client

from core import dra, kueue
from core.kube import new_api_client
from devtools.sandbox import runner
from devtools.sandbox.nodes import node_names
from devtools.waiting import wait_for
from tests.fixtures.sandbox import package_sandbox
from tests.kueue.conftest import condition
from tests.sandbox.test_queueing_kueue import IMAGE, TIMEOUT, _kueue_built, _workload

GPU = "nvidia.com/gpu"

# CI (root, `make install` builds Kueue) never skips it
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and (os.geteuid() != 0 or not _kueue_built()), reason="needs root and make kueue"
)


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    with package_sandbox(
        request, "gpucaas-kueue-dra-", nodes=node_names(1), allocation_mode=dra.DRA_MODE, queueing="kueue"
    ) as sb:
        yield sb


def test_a_dra_container_is_counted_by_its_gpus_and_runs_on_a_whole_partition(sandbox: runner.Sandbox) -> None:
    created = sandbox.api("POST", "/v1/containers", {"image": IMAGE, "gpus": 4}, token=sandbox.tenant_token)
    cid = created["id"]
    final = wait_for(
        lambda: (
            (c := sandbox.api("GET", f"/v1/containers/{cid}", token=sandbox.tenant_token))["status"]
            in ("Succeeded", "Failed")
            and c
        ),
        TIMEOUT,
        interval=0.5,
        what=f"container {cid} finished",
    )
    assert final["status"] == "Succeeded" and final["exit_code"] == 0 and final["gpus"] == 4, final

    with new_api_client(sandbox.kubeconfig) as api:
        core = client.CoreV1Api(api)
        pod = core.read_namespaced_pod(final["pod_name"], final["namespace"])
        workload = _workload(client.CustomObjectsApi(api), pod)
        node = core.read_node(pod.spec.node_name)
    # the node's GPUs, advertised by the DRA driver (no device plugin runs in this mode)
    assert (node.status.capacity[GPU], node.status.allocatable[GPU]) == ("8", "8")
    # the pod asks for its GPUs both ways: the claim (a whole partition) and the count Kueue reads
    (container,) = pod.spec.containers
    assert container.resources.limits[GPU] == "4"
    assert pod.spec.resource_claims[0].resource_claim_template_name == dra.claim_template_name(4)
    assert pod.metadata.labels[kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
    assert workload is not None, f"no Workload owned by {pod.metadata.name}"
    assert (condition(workload, "Admitted") or {}).get("status") == "True", workload.get("status")
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["resourceUsage"] == {GPU: "4"}
