"""The Kubernetes adapter against the local cluster's kube-apiserver: state from FabricState/GPULease/pods, and bind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from kubernetes import client

from core import crds
from devtools.waiting import wait_for
from services.placement.fit import gpus_of
from services.placement.fleet import FleetIndex
from services.placement.kube import FleetWatcher
from tests.placement.conftest import serve
from tests.placement.factories import fabric_status, lease, pod


def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Wait until ``check()`` is truthy; an AssertionError inside it counts as not yet."""

    def holds() -> Any:
        try:
            return check()
        except AssertionError:
            return None

    return wait_for(holds, timeout, interval=0.05, what=str(check))


def put_fabric_state(custom: client.CustomObjectsApi, node: str, **status: Any) -> str:
    """Create or update the node's FabricState; returns the resourceVersion written."""
    body = {"apiVersion": crds.API_VERSION, "kind": "FabricState", "metadata": {"name": node}, "spec": {"node": node}}
    try:
        custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    status.setdefault(
        "updated_at", datetime.now(UTC).isoformat().replace("+00:00", "Z")
    )  # as the fabric service stamps it
    written = custom.patch_cluster_custom_object_status(
        crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, node, {"status": fabric_status(**status)}
    )
    return written["metadata"]["resourceVersion"]


def seen_fabric_version(w: FleetWatcher, node: str) -> str | None:
    """The resourceVersion of the node's FabricState the watcher last took in (read under its
    lock, so the node's free mask has been recomputed from it)."""
    with w._lock:  # the watcher's own record of what it has seen
        obj = w._fabric.get(node)
    return None if obj is None else obj["metadata"]["resourceVersion"]


def put_lease(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    status = body.pop("status")
    custom.create_cluster_custom_object(crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL, body)
    custom.patch_cluster_custom_object_status(
        crds.GROUP, crds.VERSION, crds.GPULEASE_PLURAL, body["metadata"]["name"], {"status": status}
    )


@pytest.fixture
def watcher(k8s: client.ApiClient) -> Iterator[FleetWatcher]:
    core = client.CoreV1Api(k8s)
    core.create_namespace({"metadata": {"name": "tenant-acme"}})
    w = FleetWatcher(k8s, FleetIndex(), watch_timeout_seconds=5, retry_seconds=0.2)
    w.start()
    try:
        assert w.wait_synced(30)
        yield w
    finally:
        w.stop()


def free_of(w: FleetWatcher, node: str) -> set[int] | None:
    state = w.index.node(node)
    return None if state is None else set(gpus_of(state.free_mask))


def test_fleet_follows_fabric_states_leases_and_pods(k8s: client.ApiClient, watcher: FleetWatcher) -> None:
    custom = client.CustomObjectsApi(k8s)
    core = client.CoreV1Api(k8s)

    put_fabric_state(custom, "gpu-node-a")
    eventually(lambda: free_of(watcher, "gpu-node-a") == set(range(1, 9)))

    # a 2-GPU pod is bound; until the node reports it, it is assumed on choose_gpus' pair {1,3}
    holder = pod(2, name="pair-job")
    holder["spec"]["nodeName"] = "gpu-node-a"
    core.create_namespaced_pod("tenant-acme", _strip(holder))
    eventually(lambda: free_of(watcher, "gpu-node-a") == {2, 4, 5, 6, 7, 8})
    # API timestamps have one-second resolution: the fabric service's report must carry a
    # later second than the pod's creation to count as made after it.
    created = core.read_namespaced_pod("pair-job", "tenant-acme").metadata.creation_timestamp
    eventually(lambda: datetime.now(UTC).replace(microsecond=0) > created)
    # then the fabric service activates pair {1,3} for it: the pod is credited, not counted twice
    rv = put_fabric_state(custom, "gpu-node-a", active={3: "gpus:0000:18:00.0+0000:38:00.0"})
    eventually(lambda: seen_fabric_version(watcher, "gpu-node-a") == rv)
    assert free_of(watcher, "gpu-node-a") == {2, 4, 5, 6, 7, 8}

    # a GPU between tenants is being checked: not free
    put_lease(custom, lease("gpu-node-a", 8, "Checking"))
    eventually(lambda: free_of(watcher, "gpu-node-a") == {2, 4, 5, 6, 7})

    # a newer 1-GPU pod the node does not show yet is assumed where choose_gpus will put it:
    # GPU 6, whose pair mate 8 is being checked
    newer = pod(1, name="one-gpu")
    newer["spec"]["nodeName"] = "gpu-node-a"
    core.create_namespaced_pod("tenant-acme", _strip(newer))
    eventually(lambda: free_of(watcher, "gpu-node-a") == {2, 4, 5, 7})

    # a second node without a Fabric Manager is known but unusable; deleting a FabricState forgets the node
    put_fabric_state(custom, "gpu-node-b", reachable=False)
    eventually(lambda: watcher.index.node("gpu-node-b") is not None and not watcher.index.node("gpu-node-b").usable)  # type: ignore[union-attr]
    custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL, "gpu-node-b")
    eventually(lambda: watcher.index.node("gpu-node-b") is None)


def test_extender_over_http_binds_and_counts_the_pod_at_once(k8s: client.ApiClient, watcher: FleetWatcher) -> None:
    custom = client.CustomObjectsApi(k8s)
    core = client.CoreV1Api(k8s)
    put_fabric_state(custom, "gpu-node-a", active={1: "gpus:q"})  # GPUs 1-4 taken
    put_fabric_state(custom, "gpu-node-b")  # empty board
    eventually(lambda: free_of(watcher, "gpu-node-a") == {5, 6, 7, 8} and free_of(watcher, "gpu-node-b") is not None)
    created = core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-job")))
    wire = k8s.sanitize_for_serialization(created)

    with serve(watcher.index, binder=watcher) as served, httpx.Client(timeout=10) as http:
        names = ["gpu-node-a", "gpu-node-b"]
        filtered = http.post(f"{served.url}/filter", json={"Pod": wire, "Nodes": None, "NodeNames": names}).json()
        assert filtered["NodeNames"] == names
        scores = http.post(f"{served.url}/prioritize", json={"Pod": wire, "Nodes": None, "NodeNames": names}).json()
        best = max(scores, key=lambda h: h["Score"])["Host"]
        assert best == "gpu-node-a"  # the free quad, keeping node b's board whole
        bound = http.post(
            f"{served.url}/bind",
            json={
                "PodName": "quad-job",
                "PodNamespace": "tenant-acme",
                "PodUID": wire["metadata"]["uid"],
                "Node": best,
            },
        ).json()
        assert bound == {"Error": ""}
        # counted at once, before the node's fabric state shows the partition
        assert free_of(watcher, "gpu-node-a") == set()
        assert core.read_namespaced_pod("quad-job", "tenant-acme").spec.node_name == "gpu-node-a"
        again = http.post(f"{served.url}/filter", json={"Pod": wire, "Nodes": None, "NodeNames": names}).json()
        assert again["NodeNames"] == ["gpu-node-b"]
        failed = http.post(
            f"{served.url}/bind",
            json={"PodName": "missing", "PodNamespace": "tenant-acme", "PodUID": "", "Node": "gpu-node-b"},
        ).json()
        assert "404" in failed["Error"]


def _strip(body: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in body["metadata"].items() if k in ("name", "namespace", "labels")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body["spec"]}


def test_without_gpu_leases_the_fabric_alone_places(k8s: client.ApiClient) -> None:
    client.ApiextensionsV1Api(k8s).delete_custom_resource_definition("gpuleases.gpucaas.dev")
    custom = client.CustomObjectsApi(k8s)
    put_fabric_state(custom, "gpu-node-a", active={2: "gpus:q"})
    w = FleetWatcher(k8s, FleetIndex(), watch_timeout_seconds=5, retry_seconds=0.2)
    w.start()
    try:
        assert w.wait_synced(30)
        eventually(lambda: free_of(w, "gpu-node-a") == {1, 2, 3, 4})
    finally:
        w.stop()
