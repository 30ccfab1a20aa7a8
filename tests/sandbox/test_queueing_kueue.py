"""`gpucaas sandbox --queueing kueue`, in both allocation modes: Kueue's manager runs against the
sandbox's cluster, the controller and the API queue by it, the cohort's pool is the node's GPUs
(its ``nvidia.com/gpu.count``), and a 2-GPU container of a tenancy without a guarantee is
admitted from that pool by Kueue, counted as 2 GPUs, and runs to Succeeded on a real node. In
the DRA mode the DRA driver advertises the node's 8 GPUs as ``nvidia.com/gpu`` and the pod asks
for its GPUs both ways, its claim and the count Kueue reads (docs/queues.md, "The DRA mode").
Then the queue's promise: a guarantee claimed back preempts a borrower's interruptible work.

One real node. Needs root and `make kueue`; run through /work/heavy (it starts a cluster and a
real node).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from rich.console import Console

from core import dra, kueue
from core.fabric_client import FabricClient
from core.kube import new_api_client
from core.topology import partition_for
from devtools.kueue import manifests_dir
from devtools.local_cluster.binaries import bin_dir
from devtools.sandbox import runner
from devtools.sandbox.nodes import node_names
from devtools.sandbox.queueing import GPU_INSTANCE_TYPE
from devtools.sandbox.tenant_view import DEMO_TENANCY, print_banner
from devtools.waiting import wait_for
from services.api.webhooks.signing import verify
from tests.api.webhook_receiver import Receiver
from tests.fixtures.sandbox import package_sandbox, workload_of
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
GPU = "nvidia.com/gpu"
#: runs until cancelled or preempted, and ends at once on SIGTERM (a plain ``sleep`` as PID 1
#: ignores it, and would keep its GPUs through the whole grace period)
UNTIL_CANCELLED = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


@pytest.fixture(scope="module", params=[dra.DEVICE_PLUGIN_MODE, dra.DRA_MODE])
def sandbox(request: pytest.FixtureRequest) -> Iterator[runner.Sandbox]:
    with package_sandbox(
        request, "gpucaas-kueue-", nodes=node_names(1), allocation_mode=request.param, queueing="kueue"
    ) as sb:
        yield sb


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
        core = client.CoreV1Api(api)
        pod = core.read_namespaced_pod(final["pod_name"], final["namespace"])
        # the node's 8 GPUs, as its device plugin or (dra) its DRA driver advertises them; the 2
        # just used count again once their lease's post-run check has passed
        node = wait_for(
            lambda: (n := core.read_node(pod.spec.node_name)).status.allocatable.get(GPU) == "8" and n,
            TIMEOUT,
            what="the node's 8 GPUs allocatable again",
        )
        custom = client.CustomObjectsApi(api)
        workload = workload_of(custom, pod)
        cohort = custom.get_cluster_custom_object(kueue.GROUP, kueue.VERSION, "cohorts", kueue.COHORT)
    assert (node.status.capacity[GPU], node.status.allocatable[GPU]) == ("8", "8")
    # the count Kueue reads, and in the dra mode the claim of a whole partition beside it
    (container,) = pod.spec.containers
    assert container.resources.limits[GPU] == "2"
    if sandbox.allocation_mode == dra.DRA_MODE:
        assert pod.spec.resource_claims[0].resource_claim_template_name == dra.claim_template_name(2)
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


def _tenancy(sandbox: runner.Sandbox, name: str, guaranteed: int) -> str:
    """A tenancy capped at the node's 8 GPUs with ``guaranteed`` of them, and a token of it."""
    sandbox.api("POST", "/v1/admin/tenancies", {"name": name, "gpu_quota": 8, "guaranteed_gpus": guaranteed})
    return str(sandbox.api("POST", f"/v1/admin/tenancies/{name}/tokens", {})["token"])


def test_a_guarantee_claimed_back_preempts_the_borrowers_interruptible_containers(sandbox: runner.Sandbox) -> None:
    """The queue's promise on real Kueue and a real node. Tenancy B, guaranteed nothing, fills
    the node's 8 GPUs with two interruptible 4-GPU containers on capacity A is guaranteed;
    A asks for a standard 8-GPU container; Kueue reclaims A's guarantee by preempting both of
    B's; A's runs on the node's whole 8-GPU partition; each of B's ends Preempted with its
    signed webhook and a usage record of its class, and the one that asked to restart is back
    in the queue under its id, showing where it stands."""
    owner, borrower = _tenancy(sandbox, "claimant", 8), _tenancy(sandbox, "borrower", 0)
    receiver = Receiver().start()
    started: list[tuple[str, str]] = []  # (token, container id): cancelled at the end, whatever happens

    def run(token: str, gpus: int, **extra: Any) -> str:
        command = ["sh", "-c", f"echo started; {UNTIL_CANCELLED[2]}"]
        body = {"image": "busybox:1.36", "gpus": gpus, "cpu": "50m", "command": command, **extra}
        cid = str(sandbox.api("POST", "/v1/containers", body, token=token)["id"])
        started.append((token, cid))
        return cid

    def shown(token: str, cid: str) -> dict[str, Any]:
        return dict(sandbox.api("GET", f"/v1/containers/{cid}", token=token))

    def reaches(token: str, cid: str, check: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        return wait_for(lambda: c if check(c := shown(token, cid)) else None, TIMEOUT, interval=0.5, what=what)

    try:
        hook = sandbox.api(
            "POST",
            "/v1/webhooks",
            {"url": receiver.url, "events": ["container.preempted", "container.failed"]},
            token=borrower,
        )
        ends = run(borrower, 4, interruptible=True)
        comes_back = run(borrower, 4, interruptible=True, restart_on_preemption=True)
        for cid in (ends, comes_back):
            reaches(borrower, cid, lambda c: c["status"] == "Running", f"B's container {cid} running")

        claim = run(owner, 8)
        placed = reaches(owner, claim, lambda c: c["status"] == "Running", "A's 8-GPU container running")
        # the whole board: the fabric service holds the 8-GPU partition for it, and nothing else
        (node,) = sandbox.nodes
        with FabricClient(node.fabric_socket, timeout=10) as fabric:
            held = fabric.activations()
        assert [a["partition_ids"] for a in held] == [[partition_for(range(1, 9)).id]], held  # type: ignore[union-attr]
        assert placed["node_name"] == node.name and placed["interruptible"] is False

        gone = reaches(borrower, ends, lambda c: c["status"] == "Failed", "B's first container ended")
        assert gone["reason"] == "Preempted" and gone["attempt"] == 1, gone
        assert gone["message"].startswith("Preempted by the queue: another tenancy claimed its guaranteed GPUs")
        back = reaches(borrower, comes_back, lambda c: c["queue"] is not None, "B's second container back in line")
        # its next run's pod waits, gated by Kueue, behind A's claim on the whole node
        assert (back["status"], back["reason"], back["attempt"]) == ("Pending", "Preempted", 2), back
        assert back["queue"] == {"position": 1, "gpus_ahead": 0, "reason": "preempted"}
        # the preempted run's output stays readable by its attempt
        first_run = urllib.request.Request(
            f"{sandbox.api_url}/v1/containers/{comes_back}/logs?attempt=1",
            headers={"Authorization": f"Bearer {borrower}"},
        )
        with urllib.request.urlopen(first_run, timeout=30, context=sandbox.ssl_context()) as resp:
            assert resp.read() == b"started\n"

        # one signed container.preempted each; container.failed only for the one that ended
        got = wait_for(lambda: len(r := receiver.received("container.preempted")) >= 2 and r, what="both webhooks")
        assert sorted(g.event["data"]["container"]["id"] for g in got) == sorted((ends, comes_back))
        assert all(verify(hook["secret"], g.headers, g.body) for g in got)
        assert "claimant" not in b"".join(g.body for g in got).decode()  # the preemptor's name never reaches B
        failed = wait_for(lambda: receiver.received("container.failed"), what="container.failed")
        assert [g.event["data"]["container"]["id"] for g in failed] == [ends]

        # metering ended at each pod's end, with the class
        def records() -> list[dict[str, Any]] | None:
            rows = sandbox.api("GET", "/v1/usage?group_by=container", token=borrower)["data"]
            ended = [r for r in rows if not r["running"]]
            return ended if len(ended) == 2 else None

        rows = wait_for(records, TIMEOUT, what="B's two usage records")
        assert sorted(r["container_id"] for r in rows) == sorted((ends, comes_back))
        assert all(r["interruptible"] and r["attempt"] == 1 for r in rows), rows
        # from the pod's start to its end (the kubelet's times are to the second: a run the
        # queue preempted within its first second measures 0)
        assert all(r["end_source"] == "pod" and r["finished_at"] >= r["started_at"] for r in rows), rows
        assert all(r["gpu_seconds"] >= 0 for r in rows), rows
    finally:
        receiver.stop()
        for token, cid in started:
            try:
                sandbox.api("DELETE", f"/v1/containers/{cid}", token=token)
            except urllib.error.HTTPError:  # it had already ended
                pass
