"""Nothing lost, nothing duplicated: Kubernetes outages, API restarts mid-way, a crash
between creating a pod and recording it, and two replicas sharing one queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from sqlmodel import Session, col, select

from devtools.waiting import wait_for
from services.api.domain.models import Container
from services.api.domain.pods import build_pod, build_tenancy
from services.api.kube import Kube
from services.api.store import worker_state
from services.api.worker import SubmissionWorker
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import (
    get_pod,
    list_api_pods,
    mark_tenancy_ready,
    set_pod_status,
)

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


def pods_by_container(k8s: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pod in list_api_pods(k8s):
        out.setdefault(pod["metadata"]["labels"]["gpucaas.dev/container-id"], []).append(pod["metadata"]["name"])
    return out


def statuses(api: ApiServer, token: str) -> dict[str, str]:
    with api.client(token) as c:
        return {x["id"]: x["status"] for x in c.get("/v1/containers", params={"limit": 500}).json()["data"]}


def test_kubernetes_outage_queues_then_completes(
    own_cluster: Any, serve: Callable[..., ApiServer], database_url: str
) -> None:
    k8s = own_cluster.k8s
    api = serve(database_url, own_cluster.kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "outage", gpu_quota=64)
    mark_tenancy_ready(k8s, "outage")

    own_cluster.stop_apiserver()  # Kubernetes goes away
    with api.client(token) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(4)]
        queued = wait_for(
            lambda: all("Kubernetes unavailable" in (c.get(f"/v1/containers/{i}").json()["message"] or "") for i in ids)
        )
        assert queued
        assert set(statuses(api, token).values()) == {"Queued"}
        assert c.get("/readyz").status_code == 503

    own_cluster.start_apiserver()  # and comes back
    wait_for(lambda: set(statuses(api, token).values()) == {"Pending"}, timeout=90)
    pods = pods_by_container(k8s)
    assert sorted(pods) == sorted(ids)
    assert all(names == [f"gpucaas-{cid}"] for cid, names in pods.items())


def test_a_tenancy_changed_during_an_outage_reaches_its_resource_without_a_submission(
    own_cluster: Any, serve: Callable[..., ApiServer], database_url: str
) -> None:
    """A quota lowered and internet access withdrawn while Kubernetes did not answer: the admin
    gets 200 at once, and the Tenancy resource follows once Kubernetes is back, with no
    container submitted; a tenancy created during the outage gets its resource too."""
    from core import crds

    k8s = own_cluster.k8s
    api = serve(database_url, own_cluster.kubeconfig)
    with api.client() as admin:
        new_tenancy(admin, "lagging", gpu_quota=8)
        admin.patch("/v1/admin/tenancies/lagging", json={"allow_internet": True}).raise_for_status()
    custom = kc.CustomObjectsApi(k8s)

    def spec(name: str) -> dict[str, Any] | None:
        try:
            obj = custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name)
        except kc.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj["spec"])

    def internet(name: str) -> bool | None:
        return ((spec(name) or {}).get("network") or {}).get("allowInternet")

    assert wait_for(lambda: internet("lagging") is True, what="the first push")

    own_cluster.stop_apiserver()
    with api.client() as admin:
        r = admin.patch("/v1/admin/tenancies/lagging", json={"gpu_quota": 2, "allow_internet": False})
        assert r.status_code == 200 and r.json()["gpu_quota"] == 2
        assert admin.post("/v1/admin/tenancies", json={"name": "outborn", "gpu_quota": 1}).status_code == 201

    own_cluster.start_apiserver()
    wait_for(lambda: internet("lagging") is False, timeout=90, what="the lagging push")
    assert (spec("lagging") or {})["gpuQuota"] == 2
    assert wait_for(lambda: spec("outborn"), timeout=90, what="the outage-born tenancy's resource")["gpuQuota"] == 1


def test_a_push_of_an_older_revision_never_takes_a_tenancy_resource_back(kubeconfig: Path, k8s: Any) -> None:
    """Two writers push one tenancy: the admin's request (a newer revision) and a worker pass that
    read the row before it. Whatever order they reach Kubernetes in, the resource keeps the newer
    revision; a write that raced another change of the resource reads and compares again."""
    from core import crds

    custom = kc.CustomObjectsApi(k8s)
    kube = Kube(kubeconfig)

    def tenancy(revision: int, gpu_quota: int) -> dict[str, Any]:
        return build_tenancy(name="ordered", gpu_quota=gpu_quota, pod_quota=2, revision=revision)

    def held() -> tuple[int, str]:
        obj = custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "ordered")
        return obj["spec"]["gpuQuota"], obj["metadata"]["annotations"][crds.ANNOTATION_TENANCY_REVISION]

    try:
        kube.upsert_tenancy(tenancy(3, gpu_quota=4))
        assert kube.upsert_tenancy(tenancy(2, gpu_quota=8))["spec"]["gpuQuota"] == 4  # the stale pass
        assert held() == (4, "3")
        kube.upsert_tenancy(tenancy(4, gpu_quota=4))  # same spec, later revision: the mark moves on
        assert held() == (4, "4")
        kube.upsert_tenancy(tenancy(3, gpu_quota=8))
        assert held() == (4, "4")

        # between this writer's read and its write, another change lands (here a label)
        reads: list[dict[str, Any]] = []
        read = kube.get_tenancy

        def read_then_race(name: str, *, retry: bool = True) -> dict[str, Any]:
            reads.append(obj := read(name, retry=retry))
            if len(reads) == 1:
                custom.patch_cluster_custom_object(
                    crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name, {"metadata": {"labels": {"raced": "yes"}}}
                )
            return obj

        kube.get_tenancy = read_then_race  # type: ignore[method-assign]
        kube.upsert_tenancy(tenancy(5, gpu_quota=6))
        assert len(reads) == 2  # the first write was refused (409: stale resourceVersion), then redone
        assert held() == (6, "5")
    finally:
        try:
            custom.delete_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "ordered")
        except kc.exceptions.ApiException:
            pass
        kube.close()


def test_api_restart_mid_way_loses_and_duplicates_nothing(
    kubeconfig: Path, k8s: Any, serve: Callable[..., ApiServer], database_url: str
) -> None:
    first = serve(database_url, kubeconfig)
    with first.client() as admin:
        token = new_tenancy(admin, "restart", gpu_quota=64)
    mark_tenancy_ready(k8s, "restart")
    with first.client(token) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(12)]
    wait_for(lambda: pods_by_container(k8s))
    first.stop()  # stopped mid-way through the burst
    created_before = set(pods_by_container(k8s))
    # while the API is down, one pod starts running (an event the API must not miss)
    some = sorted(created_before)[0]
    set_pod_status(k8s, "tenant-restart", f"gpucaas-{some}", {"phase": "Running"})

    second = serve(database_url, kubeconfig)
    wait_for(lambda: "Queued" not in statuses(second, token).values(), timeout=90)
    pods = pods_by_container(k8s)
    assert sorted(pods) == sorted(ids)
    assert all(len(names) == 1 for names in pods.values())
    wait_for(lambda: statuses(second, token)[some] == "Running")


def test_crash_between_pod_creation_and_commit(
    kubeconfig: Path, k8s: Any, serve: Callable[..., ApiServer], database_url: str, dead_kubeconfig: Path
) -> None:
    # Submissions committed while Kubernetes was unreachable...
    offline = serve(database_url, dead_kubeconfig)
    with offline.client() as admin:
        token = new_tenancy(admin, "crash")
    with offline.client(token) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(2)]
    offline.stop()
    # ...then a replica created the first one's pod and died before recording it.
    kc.CoreV1Api(k8s).create_namespace({"metadata": {"name": "tenant-crash"}})
    kc.CoreV1Api(k8s).create_namespaced_pod(
        "tenant-crash", build_pod(container_id=ids[0], tenancy="crash", image=IMAGE, gpus=1)
    )
    online = serve(database_url, kubeconfig)
    mark_tenancy_ready(k8s, "crash")
    wait_for(lambda: set(statuses(online, token).values()) == {"Pending"}, timeout=90)
    pods = pods_by_container(k8s)
    assert sorted(pods) == sorted(ids) and all(len(v) == 1 for v in pods.values())
    assert get_pod(k8s, "tenant-crash", f"gpucaas-{ids[0]}") is not None


def test_a_replica_that_stops_cleanly_hands_back_the_submissions_it_claimed(
    serve: Callable[..., ApiServer], database_url: str, dead_kubeconfig: Path
) -> None:
    """A rolling update stops replicas one by one: what a stopped one held mid-pass goes to
    the others at once, not when its claims run out (a crashed one's still run out); another
    replica's claims stay its own."""
    api = serve(database_url, dead_kubeconfig, run_worker=False)
    with api.client() as admin:
        token = new_tenancy(admin, "handback")
    with api.client(token) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(2)]
    engine = api.app.state.engine
    stopping = SubmissionWorker(engine=engine, kube=api.app.state.kube, settings=api.settings, replica="stopping")
    with Session(engine) as session:  # each replica mid-pass on one row
        [other] = [row.id for row in worker_state.claim_due(session, replica="other", claim_seconds=60, limit=1)]
        [held] = [row.id for row in worker_state.claim_due(session, replica="stopping", claim_seconds=60, limit=1)]

    def holders() -> dict[str, str | None]:
        with Session(engine) as session:
            rows = session.exec(select(Container).where(col(Container.id).in_(ids)))
            return {row.id: row.claimed_by for row in rows}

    assert holders() == {other: "other", held: "stopping"}
    stopping.stop()
    assert holders() == {other: "other", held: None}


@pytest.mark.postgres
def test_two_replicas_share_the_queue(
    kubeconfig: Path, k8s: Any, serve: Callable[..., ApiServer], postgres_url: str
) -> None:
    one = serve(postgres_url, kubeconfig)
    two = serve(postgres_url, kubeconfig)
    with one.client() as admin:
        token = new_tenancy(admin, "replicas", gpu_quota=64)
    mark_tenancy_ready(k8s, "replicas")
    ids = []
    for i in range(16):
        with (one if i % 2 else two).client(token) as c:
            ids.append(c.post("/v1/containers", json={"image": IMAGE}).json()["id"])
    wait_for(lambda: set(statuses(one, token).values()) == {"Pending"}, timeout=90)
    pods = pods_by_container(k8s)
    assert sorted(pods) == sorted(ids) and all(len(v) == 1 for v in pods.values())
    assert one.worker.submitted + two.worker.submitted == 16
