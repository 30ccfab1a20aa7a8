"""A partition held by a fabric holder other than a claim is never offered in the DRA mode.

A foreign holder (the test, through gpu-node-a's fabric service, as an admin's activation or
another allocation path would) keeps GPU 1 of gpu-node-a active. kube-scheduler knows
nothing of it; the DRA driver stops offering every partition overlapping it in gpu-node-a's
ResourceSlices, so no claim is allocated a partition the fabric service would refuse. An
8-GPU claim goes to gpu-node-b and, while that one runs, a 4-GPU claim to gpu-node-a's
other quad; no activation fails on the way (before, kube-scheduler allocated gpu-node-a's
whole board, the activation failed, and first fit allocated it again after every failure).
When the holder lets go, gpu-node-a offers all its partitions again.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client

from core import dra
from core.fabric_client import FabricClient
from devtools.sandbox import runner
from devtools.sandbox.dra_demo import dra_pod, ensure_namespace, gpus_of_devices
from devtools.waiting import wait_for
from tests.e2e.conftest import ALL_GPUS, activations, allocation_mode, leases, offered_gpus, pci_of

pytestmark = pytest.mark.skipif(
    allocation_mode() != "dra", reason="the DRA allocation mode's slices (make test-e2e-dra)"
)

NS = "e2e-dra-binding"
BLOCKER = "e2e:blocker"
BLOCKED_GPU = 1  # physical id on gpu-node-a
FREE_OF_THE_BLOCKER = ALL_GPUS - {BLOCKED_GPU}


def _unscored_template(custom: client.CustomObjectsApi, gpus: int) -> str:
    """A template of gpucaas' request under a name that is not one of gpucaas' own
    (gpucaas-gpus-N): the extender gives its pods no preference, so where they go is the
    slices' doing alone."""
    template = dra.claim_template(gpus, NS)
    name = template["metadata"]["name"] = f"unscored-gpus-{gpus}"
    try:
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaimtemplates", template)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    return name


def _claims_held_on(custom: client.CustomObjectsApi, node: str) -> list[dict[str, Any]]:
    claims = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceclaims")["items"]
    return [
        r
        for c in claims
        for r in ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])
        if r["pool"] == node
    ]


def _devices_of(core: client.CoreV1Api, custom: client.CustomObjectsApi, pod: str) -> tuple[str, list[str]]:
    """(node, devices allocated to the pod's claim)."""
    p = core.read_namespaced_pod(pod, NS)
    (status,) = p.status.resource_claim_statuses
    claim = custom.get_namespaced_custom_object(
        "resource.k8s.io", "v1", NS, "resourceclaims", status.resource_claim_name
    )
    return p.spec.node_name, [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


@contextmanager
def _conditions_seen(custom: client.CustomObjectsApi) -> Iterator[list[tuple[str, str]]]:
    """Every (pool, condition type) the namespace's claims show True, while the block runs."""
    seen: list[tuple[str, str]] = []
    stop = threading.Event()

    def watch_claims() -> None:
        while not stop.is_set():
            for c in custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"]:
                for d in (c.get("status") or {}).get("devices") or []:
                    for cond in d.get("conditions") or []:
                        if cond.get("status") == "True" and (d["pool"], cond["type"]) not in seen:
                            seen.append((d["pool"], cond["type"]))
            stop.wait(0.1)

    watcher = threading.Thread(target=watch_claims, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join(timeout=10)


@contextmanager
def _blocked(sandbox: runner.Sandbox, k8s: client.ApiClient) -> Iterator[None]:
    """GPU 1 of gpu-node-a held by a holder that is not a claim, from the moment both boards
    are whole (the tests before leave GPUs being checked for a while) until the holder lets
    go and gpu-node-a offers every partition again; no claim keeps a partition active after."""
    custom = client.CustomObjectsApi(k8s)
    node_a = next(n for n in sandbox.nodes if n.name == "gpu-node-a")

    def both_boards_whole() -> bool:
        # every lease Free too: a pod deleted just before still has its GPUs leased until the
        # node's lease agent sees it gone, then checked (its partitions tainted meanwhile), and
        # a board offered whole in that gap stops being offered a moment later
        return all((lz.get("status") or {}).get("state") == "Free" for lz in leases(k8s)) and all(
            offered_gpus(k8s, n) == ALL_GPUS and not _claims_held_on(custom, n) for n in ("gpu-node-a", "gpu-node-b")
        )

    wait_for(both_boards_whole, timeout=180, what="both boards whole and offered")
    with FabricClient(node_a.fabric_socket, timeout=10) as fc:
        fc.activate(BLOCKER, [pci_of(sandbox, "gpu-node-a")[BLOCKED_GPU]])
    try:
        yield
    finally:
        with FabricClient(node_a.fabric_socket, timeout=10) as fc:
            fc.release(BLOCKER)
    wait_for(
        lambda: offered_gpus(k8s, "gpu-node-a") == ALL_GPUS,
        timeout=120,
        what="gpu-node-a offering every partition once the holder let go",
    )
    wait_for(
        lambda: not [a for acts in activations(sandbox).values() for a in acts if a["holder"].startswith("claim:")],
        timeout=120,
        what="no partition held by a claim",
    )


def _delete_now(core: client.CoreV1Api, *pods: str) -> None:
    for pod in pods:
        try:
            core.delete_namespaced_pod(pod, NS, grace_period_seconds=0)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(
        lambda: not [p for p in core.list_namespaced_pod(NS).items if p.metadata.name in pods],
        timeout=120,
        what=f"pods {pods} gone",
    )


def _running(core: client.CoreV1Api, pod: str) -> bool:
    phase = core.read_namespaced_pod(pod, NS).status.phase
    assert phase not in ("Succeeded", "Failed"), phase
    return bool(phase == "Running")


def test_a_partition_held_by_another_holder_is_not_offered_and_claims_go_where_it_works(
    sandbox: runner.Sandbox, k8s: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=())
    eight, four = _unscored_template(custom, 8), _unscored_template(custom, 4)
    with _blocked(sandbox, k8s), _conditions_seen(custom) as seen:
        # the driver offers no partition with GPU 1 on gpu-node-a any more (tainted held-on-fabric), and
        # every other one
        wait_for(
            lambda: offered_gpus(k8s, "gpu-node-a") == FREE_OF_THE_BLOCKER,
            timeout=60,
            what="gpu-node-a's slice without the partitions of the held GPU",
        )
        # gpu-node-b offers everything once the GPUs earlier tests used are released and checked
        wait_for(
            lambda: offered_gpus(k8s, "gpu-node-b") == ALL_GPUS,
            timeout=120,
            what="gpu-node-b's slice with every partition",
        )
        try:
            for name, template in (("eight", eight), ("four", four)):
                pod = dra_pod(name, 8 if name == "eight" else 4, seconds=3600)
                pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
                core.create_namespaced_pod(NS, pod)
                wait_for(lambda name=name: _running(core, name), timeout=180, what=f"pod {name} running")
            # the whole board only gpu-node-b has; then, gpu-node-b full, gpu-node-a's quad without GPU 1
            node, devices = _devices_of(core, custom, "eight")
            assert (node, gpus_of_devices(devices)) == ("gpu-node-b", set(range(1, 9)))
            node, devices = _devices_of(core, custom, "four")
            assert (node, gpus_of_devices(devices)) == ("gpu-node-a", {5, 6, 7, 8})
            both_active = {("gpu-node-a", dra.BINDING_CONDITION), ("gpu-node-b", dra.BINDING_CONDITION)}
            wait_for(lambda: both_active <= set(seen), timeout=60, what="both claims' partitions reported active")
        finally:
            _delete_now(core, "eight", "four")
    # no activation was ever refused
    assert not [s for s in seen if s[1] == dra.BINDING_FAILURE_CONDITION], seen


def test_the_extender_sends_a_gpucaas_claim_past_the_blocked_board(
    sandbox: runner.Sandbox, k8s: client.ApiClient
) -> None:
    """With gpucaas' own template the prioritize-only extender, which sees the blocker's
    partition in gpu-node-a's FabricState, scores gpu-node-b best too: the pod runs there."""
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(8,))

    def extender_sees_the_blocker() -> bool:
        """The extender's own view (GET /v1/nodes): gpu-node-a no longer has 8 GPUs free, and
        gpu-node-b has all 8."""
        assert sandbox.extender_url is not None
        with urllib.request.urlopen(f"{sandbox.extender_url}/v1/nodes", timeout=10) as resp:
            nodes = {n["node"]: n for n in json.load(resp)["nodes"]}
        return (
            "gpu-node-a" in nodes
            and len(nodes["gpu-node-a"]["free"]) < 8
            and "gpu-node-b" in nodes
            and len(nodes["gpu-node-b"]["free"]) == 8
        )

    with _blocked(sandbox, k8s), _conditions_seen(custom) as seen:
        wait_for(extender_sees_the_blocker, timeout=180, what="the extender to see the blocker")
        core.create_namespaced_pod(NS, dra_pod("eight-scored", 8, seconds=2))
        wait_for(
            lambda: core.read_namespaced_pod("eight-scored", NS).status.phase in ("Succeeded", "Failed"),
            timeout=240,
            what="the 8-GPU pod to finish",
        )
    pod = core.read_namespaced_pod("eight-scored", NS)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == "gpu-node-b"
    assert [node for node, _ in seen] == ["gpu-node-b"], seen
