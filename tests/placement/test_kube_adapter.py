"""The Kubernetes adapter against the local cluster's kube-apiserver: state from FabricState/GPULease/pods, and bind."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from kubernetes import client

from core import crds
from devtools.waiting import wait_for
from services.placement.errors import BindFailed
from services.placement.extender import BindingArgs
from services.placement.fit import gpus_of, mask_of
from services.placement.fleet import FleetIndex, Freeing
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


def played_watcher(k8s: client.ApiClient, *nodes: str) -> FleetWatcher:
    """A watcher whose watch threads the test plays (it is not started): the namespace
    tenant-acme, an empty board's FabricState per node, listed once; no leases, no pods."""
    custom = client.CustomObjectsApi(k8s)
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "tenant-acme"}})
    for node in nodes:
        put_fabric_state(custom, node)
    w = FleetWatcher(k8s, FleetIndex())
    w._replace_fabric(custom.list_cluster_custom_object(crds.GROUP, crds.VERSION, crds.FABRICSTATE_PLURAL)["items"])
    w._replace_leases([])
    w._replace_pods([])
    return w


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
    # ... and frees by itself soon (what the partition check waits for)
    assert watcher.freeing() == {"gpu-node-a": Freeing(mask_of({8}))}

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
    assert set(watcher.freeing()) == {"gpu-node-a"}


def test_extender_over_http_binds_and_counts_the_pod_at_once(k8s: client.ApiClient, watcher: FleetWatcher) -> None:
    custom = client.CustomObjectsApi(k8s)
    core = client.CoreV1Api(k8s)
    put_fabric_state(custom, "gpu-node-a", active={1: "gpus:q"})  # GPUs 1-4 taken
    put_fabric_state(custom, "gpu-node-b")  # empty board
    eventually(lambda: free_of(watcher, "gpu-node-a") == {5, 6, 7, 8} and free_of(watcher, "gpu-node-b") is not None)
    created = core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-job")))
    wire = k8s.sanitize_for_serialization(created)

    reads: list[str] = []
    read_pod = watcher.core.read_namespaced_pod
    watcher.core.read_namespaced_pod = lambda name, *a, **kw: reads.append(name) or read_pod(name, *a, **kw)  # type: ignore[method-assign]
    with serve(watcher.index, binder=watcher) as served, httpx.Client(timeout=10) as http:
        names = ["gpu-node-a", "gpu-node-b"]
        filtered = http.post(f"{served.url}/filter", json={"Pod": wire, "Nodes": None, "NodeNames": names}).json()
        (best,) = filtered["NodeNames"]  # the best fit alone
        assert best == "gpu-node-a"  # the free quad, keeping node b's board whole
        assert _bind(http, served.url, wire, best) == {"Error": ""}
        # counted at once, before the node's fabric state shows the partition
        assert free_of(watcher, "gpu-node-a") == set()
        assert core.read_namespaced_pod("quad-job", "tenant-acme").spec.node_name == "gpu-node-a"
        assert reads == []  # the bind used the pod its filter call sent, not a GET of it
        again = http.post(f"{served.url}/filter", json={"Pod": wire, "Nodes": None, "NodeNames": names}).json()
        assert again["NodeNames"] == ["gpu-node-b"]
        failed = http.post(
            f"{served.url}/bind",
            json={"PodName": "missing", "PodNamespace": "tenant-acme", "PodUID": "", "Node": "gpu-node-b"},
        ).json()
        assert "404" in failed["Error"] and reads == ["missing"]  # never filtered: read, and gone


def _bind(http: httpx.Client, url: str, wire: dict[str, Any], node: str) -> dict[str, Any]:
    meta = wire["metadata"]
    args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    return http.post(f"{url}/bind", json=args).json()  # type: ignore[no-any-return]


def test_a_bind_that_finds_its_partition_taken_since_the_filter_is_refused(
    k8s: client.ApiClient, watcher: FleetWatcher
) -> None:
    """kube-scheduler binds asynchronously: it filters the next pod while the last one's bind
    is still on its way, so both can pass the filter on the same free quad. The second bind
    must be refused (kube-scheduler schedules that pod again), not given GPUs that form no
    partition."""
    custom = client.CustomObjectsApi(k8s)
    core = client.CoreV1Api(k8s)
    put_fabric_state(custom, "gpu-node-a", active={1: "gpus:q"})  # GPUs 1-4 taken
    eventually(lambda: free_of(watcher, "gpu-node-a") == {5, 6, 7, 8})
    first = k8s.sanitize_for_serialization(core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-1"))))
    second = k8s.sanitize_for_serialization(core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-2"))))

    with serve(watcher.index, binder=watcher) as served, httpx.Client(timeout=10) as http:
        for wire in (first, second):  # both filtered before either is bound
            filtered = http.post(f"{served.url}/filter", json={"Pod": wire, "NodeNames": ["gpu-node-a"]}).json()
            assert filtered["NodeNames"] == ["gpu-node-a"]
        assert _bind(http, served.url, first, "gpu-node-a") == {"Error": ""}
        refused = _bind(http, served.url, second, "gpu-node-a")["Error"]

    assert "no room for 4 GPUs" in refused and "free GPUs []" in refused, refused
    assert core.read_namespaced_pod("quad-2", "tenant-acme").spec.node_name is None  # not bound
    assert core.read_namespaced_pod("quad-1", "tenant-acme").spec.node_name == "gpu-node-a"
    assert free_of(watcher, "gpu-node-a") == set()
    # the refused pod left nothing counted: once quad-1 is gone, the quad is free again
    core.delete_namespaced_pod("quad-1", "tenant-acme", grace_period_seconds=0)
    eventually(lambda: free_of(watcher, "gpu-node-a") == {5, 6, 7, 8})


def test_a_bound_pod_stays_counted_through_a_lagging_watch_and_a_failed_binding_counts_nothing(
    k8s: client.ApiClient,
) -> None:
    """The pod watch may deliver events written before the bind after it: they must not take the
    pod's GPUs back. This test plays the watch threads itself (the watcher is not started), so
    that it decides which event comes when; the API calls are the real ones."""
    core = client.CoreV1Api(k8s)
    w = played_watcher(k8s, "gpu-node-a")
    assert free_of(w, "gpu-node-a") == set(range(1, 9))
    created = k8s.sanitize_for_serialization(core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-1"))))

    w.bind(BindingArgs("quad-1", "tenant-acme", created["metadata"]["uid"], "gpu-node-a"))
    free = free_of(w, "gpu-node-a")
    assert free is not None and len(free) == 4  # counted at once
    # events from before the bind, delivered after it (and a relist served the same), change nothing
    w._on_pod("ADDED", created)
    w._replace_pods([created])
    assert free_of(w, "gpu-node-a") == free
    # the bound pod's own event settles the assumption, on the same GPUs
    w._on_pod("MODIFIED", k8s.sanitize_for_serialization(core.read_namespaced_pod("quad-1", "tenant-acme")))
    assert not w._assumed and free_of(w, "gpu-node-a") == free

    # a Binding the API server refuses (the pod is being deleted: a finalizer holds it) counts nothing
    held = _strip(pod(4, name="quad-2"))
    held["metadata"]["finalizers"] = ["gpucaas.dev/test-hold"]
    other = k8s.sanitize_for_serialization(core.create_namespaced_pod("tenant-acme", held))
    core.delete_namespaced_pod("quad-2", "tenant-acme")
    with pytest.raises(BindFailed, match="being deleted"):
        w.bind(BindingArgs("quad-2", "tenant-acme", other["metadata"]["uid"], "gpu-node-a"))
    assert not w._assumed and free_of(w, "gpu-node-a") == free
    core.patch_namespaced_pod("quad-2", "tenant-acme", {"metadata": {"finalizers": None}})
    other = k8s.sanitize_for_serialization(core.create_namespaced_pod("tenant-acme", _strip(pod(4, name="quad-3"))))
    # a pod deleted after its bind, before any event: the relist that no longer lists it ends the assumption
    w.bind(BindingArgs("quad-3", "tenant-acme", other["metadata"]["uid"], "gpu-node-a"))
    assert free_of(w, "gpu-node-a") == set()
    core.delete_namespaced_pod("quad-3", "tenant-acme", grace_period_seconds=0)
    eventually(lambda: "quad-2" not in {p.metadata.name for p in core.list_namespaced_pod("tenant-acme").items})
    listing = k8s.sanitize_for_serialization(core.list_namespaced_pod("tenant-acme"))["items"]
    assert [p["metadata"]["name"] for p in listing] == ["quad-1"]
    w._replace_pods(listing)
    assert not w._assumed and free_of(w, "gpu-node-a") == free


def test_binds_to_one_node_go_one_at_a_time_and_to_other_nodes_beside_them(k8s: client.ApiClient) -> None:
    """A node admits pods in the order their Bindings are written: a second bind to the same
    node waits for the first's Binding, so that they cannot be written in the other order than
    the extender counted them. A bind to another node does not wait."""
    core = client.CoreV1Api(k8s)
    w = played_watcher(k8s, "gpu-node-a", "gpu-node-b")
    uids = {
        name: core.create_namespaced_pod("tenant-acme", _strip(pod(2, name=name))).metadata.uid
        for name in ("first", "second", "elsewhere")
    }
    release = threading.Event()
    real_json = w.kube.json

    def json(fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if fn == w.core.create_namespaced_binding and args[1]["metadata"]["name"] == "first":
            assert release.wait(30)  # the first Binding hangs on its way to the API server
        return real_json(fn, *args, **kwargs)

    w.kube.json = json  # type: ignore[method-assign]
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(w.bind, BindingArgs("first", "tenant-acme", uids["first"], "gpu-node-a"))
        eventually(lambda: "tenant-acme/first" in w._assumed)
        second = pool.submit(w.bind, BindingArgs("second", "tenant-acme", uids["second"], "gpu-node-a"))
        pool.submit(w.bind, BindingArgs("elsewhere", "tenant-acme", uids["elsewhere"], "gpu-node-b")).result(30)
        assert core.read_namespaced_pod("elsewhere", "tenant-acme").spec.node_name == "gpu-node-b"
        assert not second.done() and "tenant-acme/second" not in w._assumed  # waiting: not even counted yet
        release.set()
        first.result(30)
        second.result(30)
    assert [core.read_namespaced_pod(n, "tenant-acme").spec.node_name for n in ("first", "second")] == [
        "gpu-node-a",
        "gpu-node-a",
    ]
    assert free_of(w, "gpu-node-a") == set(range(1, 9)) - set(gpus_of(w._positions["tenant-acme/first"])) - set(
        gpus_of(w._positions["tenant-acme/second"])
    )


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
