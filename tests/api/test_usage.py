"""Usage records against the local cluster's kube-apiserver, on both databases: a run is charged
from the container's own start and end, exactly once, across API restarts; the reports,
CSV, the Prometheus counter and monthly GPU-hour budgets."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from sqlmodel import Session

from devtools.waiting import wait_for
from services.api.domain.models import utcnow
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready
from tests.api.usage_helpers import add_gpu_node, end_run, record_of, stamp, start_run, submit


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def _metric(api: ApiServer, tenancy: str) -> float | None:
    with api.client(None) as anon:
        text = anon.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(f'gpucaas_usage_gpu_seconds_total{{tenancy="{tenancy}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_run_is_charged_from_the_containers_own_times(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "meter")
    mark_tenancy_ready(k8s, "meter")
    add_gpu_node(k8s, "dgx-a")
    now = utcnow().replace(microsecond=0)
    pod_start, started, finished = now - timedelta(seconds=40), now - timedelta(seconds=10), now - timedelta(seconds=7)
    with api.client(token) as c:
        cid = submit(c, gpus=2)
        # waiting for the image and the partition (pod startTime → container startedAt) is not charged
        start_run(k8s, "meter", cid, node="dgx-a", pod_start=pod_start, started=started)
        running = wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        assert running["running"] is True and running["started_at"] == stamp(started)
        assert running["finished_at"] is None and running["gpu_seconds"] >= 20  # up to now, 2 GPUs

        end_run(k8s, "meter", cid, pod_start=pod_start, started=started, finished=finished)
        done = wait_for(lambda: (r := record_of(c, cid)) and not r["running"] and r, 60, what="the run's end")
        assert done == {
            "container_id": cid,
            "attempt": 1,
            "tenancy": "meter",
            "gpus": 2,
            "gpu_model": "NVIDIA-H100-80GB-HBM3",
            "node_name": "dgx-a",
            "nvlink_partition_size": 2,
            "interruptible": False,
            "started_at": stamp(started),
            "finished_at": stamp(finished),
            "running": False,
            "end_source": "pod",
            "gpu_seconds": 6.0,
            "gpu_hours": round(6 / 3600, 6),
        }
        day = c.get("/v1/usage").json()
        assert day["group_by"] == "day" and day["tenancy"] == "meter" and day["total_gpu_seconds"] == 6.0
        assert day["data"] == [
            {
                "day": started.date().isoformat(),
                "tenancy": "meter",
                "gpu_seconds": 6.0,
                "gpu_hours": round(6 / 3600, 6),
                "containers": 1,
            }
        ]
        # a window that ends halfway through the run charges the half inside it
        half = c.get(
            "/v1/usage",
            params={
                "group_by": "container",
                "from": stamp(started - timedelta(hours=1)),
                "to": stamp(started + timedelta(seconds=1)),
            },
        ).json()
        assert half["total_gpu_seconds"] == 2.0
    assert wait_for(lambda: _metric(api, "meter"), 30, what="the GPU-seconds counter") == 6.0

    with api.client() as admin:
        r = admin.get("/v1/admin/usage", params={"group_by": "container"}, headers={"Accept": "text/csv"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(r.text)))
        mine = [row for row in rows if row["container_id"] == cid]
        assert len(mine) == 1 and mine[0]["gpu_seconds"] == "6.0" and mine[0]["gpu_model"] == "NVIDIA-H100-80GB-HBM3"
        assert admin.get("/v1/usage", params={"tenancy": "meter"}).json()["total_gpu_seconds"] == 6.0


def test_a_run_that_ends_while_the_api_is_down_is_charged_from_the_pods_times(
    kubeconfig: Path,
    serve: Callable[..., ApiServer],
    database_url: str,
    k8s: Any,
) -> None:
    api = serve(database_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "outage")
    mark_tenancy_ready(k8s, "outage")
    add_gpu_node(k8s, "dgx-b")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=30), now - timedelta(seconds=25)
    with api.client(token) as c:
        cid = submit(c, gpus=4)
        start_run(k8s, "outage", cid, node="dgx-b", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
    api.stop()  # the API (and its worker) is down while the container ends
    end_run(k8s, "outage", cid, pod_start=started, started=started, finished=finished)

    again = serve(database_url, kubeconfig)
    with again.client(token) as c:
        done = wait_for(lambda: (r := record_of(c, cid)) and not r["running"] and r, 60, what="the run's end")
        assert (done["started_at"], done["finished_at"]) == (stamp(started), stamp(finished))
        assert done["gpu_seconds"] == 20.0 and done["end_source"] == "pod"
        # the worker closes the usage record, then applies the pod's state in a transaction of its own
        wait_for(
            lambda: c.get(f"/v1/containers/{cid}").json()["status"] == "Succeeded", 30, what="the container Succeeded"
        )
    again.stop()
    # a third start sees the same pod again: still one record, the same sum
    third = serve(database_url, kubeconfig)
    with third.client(token) as c:
        wait_for(lambda: third.worker is not None, 10)
        rows = c.get("/v1/usage", params={"group_by": "container"}).json()
        assert [r["container_id"] for r in rows["data"]] == [cid] and rows["total_gpu_seconds"] == 20.0
    assert _metric(third, "outage") == 20.0


def test_a_cancelled_run_ends_when_its_pod_is_deleted(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "stopper")
    mark_tenancy_ready(k8s, "stopper")
    started = utcnow().replace(microsecond=0) - timedelta(seconds=5)
    with api.client(token) as c:
        cid = submit(c, gpus=1)
        start_run(k8s, "stopper", cid, node="dgx-c", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        assert c.delete(f"/v1/containers/{cid}").status_code == 200
        done = wait_for(lambda: (r := record_of(c, cid)) and not r["running"] and r, 60, what="the run's end")
        assert done["end_source"] == "deleted" and done["gpu_model"] is None  # dgx-c is no node it knows
        assert 5 <= done["gpu_seconds"] < 120


def test_a_cancelled_run_ends_when_the_worker_deletes_its_pod_even_unwatched(api: ApiServer, k8s: Any) -> None:
    """The pod watch may be down when a cancelled container's pod goes (kube-apiserver restarting,
    as in the chaos soak): the run ends when the worker deleted the pod, not at the next relist."""
    from services.api.domain.models import Container

    with api.client() as admin:
        token = new_tenancy(admin, "unwatched")
    mark_tenancy_ready(k8s, "unwatched")
    started = utcnow().replace(microsecond=0) - timedelta(seconds=5)
    with api.client(token) as c:
        cid = submit(c, gpus=2)
        start_run(k8s, "unwatched", cid, node="dgx-e", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        worker = api.worker
        worker.stop()  # no watch from here on: only the deletion itself can end the run
        with Session(worker.engine) as session:
            row = session.get(Container, cid)
            assert row is not None
        before = utcnow()
        worker._delete_pod(row)
        after = utcnow()
        done = record_of(c, cid)
        assert done["end_source"] == "deleted" and not done["running"], done
        from datetime import datetime

        ended = datetime.fromisoformat(done["finished_at"].replace("Z", "+00:00"))
        assert before - timedelta(seconds=1) <= ended <= after + timedelta(seconds=1), (before, ended, after)
        assert 2 * 5 <= done["gpu_seconds"] <= 2 * ((after - started).total_seconds() + 1)


def test_a_cancelled_run_that_ended_unwatched_is_charged_to_its_own_end(api: ApiServer, k8s: Any) -> None:
    """The container ended while the pod watch was down, and was cancelled before the watch saw
    it: the pod's deletion answers with its last state, and the run is charged to the
    container's own end, not to the deletion."""
    from services.api.domain.models import Container

    with api.client() as admin:
        token = new_tenancy(admin, "endedunseen")
    mark_tenancy_ready(k8s, "endedunseen")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=30), now - timedelta(seconds=27)
    with api.client(token) as c:
        cid = submit(c, gpus=2)
        start_run(k8s, "endedunseen", cid, node="dgx-u", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        worker = api.worker
        worker.stop()  # the watch is down from here on
        end_run(k8s, "endedunseen", cid, pod_start=started, started=started, finished=finished)
        with Session(worker.engine) as session:
            row = session.get(Container, cid)
            assert row is not None
        worker._delete_pod(row)
        done = record_of(c, cid)
    assert (done["end_source"], done["finished_at"], done["gpu_seconds"]) == ("pod", stamp(finished), 6.0), done


def test_a_cancelled_run_that_ends_and_goes_while_the_api_is_down_is_charged_to_its_own_end(
    kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str, k8s: Any
) -> None:
    """Cancelled while its node's kubelet was down: the run is first charged to the deletion.
    With the API down, the kubelet comes back, reports the container's end (before the
    deletion) and deletes the pod; the API's finalizer holds the pod, so the API back up
    charges the run to the container's own end and only then lets the pod go."""
    api = serve(database_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "heldback")
    mark_tenancy_ready(k8s, "heldback")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=20), now - timedelta(seconds=17)
    ns, name = "tenant-heldback", None
    with api.client(token) as c:
        cid = submit(c, gpus=2)
        name = f"gpucaas-{cid}"
        start_run(k8s, "heldback", cid, node="down-dgx-h", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        assert c.delete(f"/v1/containers/{cid}").status_code == 200
        estimate = wait_for(lambda: (r := record_of(c, cid)) and not r["running"] and r, 60, what="the estimate")
        assert estimate["end_source"] == "deleted"
    pod = get_pod(k8s, ns, name)
    assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] > 0  # waits for its kubelet (down)
    api.stop()

    end_run(k8s, "heldback", cid, pod_start=started, started=started, finished=finished)  # the kubelet, back
    kc.CoreV1Api(k8s).delete_namespaced_pod(name, ns, grace_period_seconds=0)  # ... and its last word
    held = get_pod(k8s, ns, name)
    assert held is not None and held["metadata"]["finalizers"] == ["gpucaas.dev/usage"]

    again = serve(database_url, kubeconfig)
    with again.client(token) as c:
        done = wait_for(lambda: (r := record_of(c, cid)) and r["end_source"] == "pod" and r, 60, what="the pod's end")
    assert (done["finished_at"], done["gpu_seconds"]) == (stamp(finished), 6.0), done
    wait_for(lambda: get_pod(k8s, ns, name) is None, 60, what="the pod let go")


def test_a_run_whose_pod_went_while_the_api_was_down_ends_when_it_is_found(
    kubeconfig: Path,
    serve: Callable[..., ApiServer],
    database_url: str,
    k8s: Any,
) -> None:
    """Force-deleted while the API was down: the finalizer keeps the pod, and the run ends at
    its deletion. A pod whose finalizer was taken off by hand vanishes: its run ends when the
    API finds it gone."""
    api = serve(database_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "vanish")
    mark_tenancy_ready(k8s, "vanish")
    started = utcnow().replace(microsecond=0) - timedelta(seconds=5)
    with api.client(token) as c:
        deleted, vanished = submit(c, gpus=1), submit(c, gpus=1)
        for cid in (deleted, vanished):
            start_run(k8s, "vanish", cid, node="dgx-d", pod_start=started, started=started)
            wait_for(lambda cid=cid: record_of(c, cid), 60, what="the run's record")
    api.stop()
    core = kc.CoreV1Api(k8s)
    core.patch_namespaced_pod(
        f"gpucaas-{vanished}",
        "tenant-vanish",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    for cid in (deleted, vanished):
        core.delete_namespaced_pod(f"gpucaas-{cid}", "tenant-vanish", grace_period_seconds=0)
    assert get_pod(k8s, "tenant-vanish", f"gpucaas-{vanished}") is None
    again = serve(database_url, kubeconfig)
    with again.client(token) as c:
        for cid, source in ((deleted, "deleted"), (vanished, "vanished")):
            done = wait_for(lambda cid=cid: (r := record_of(c, cid)) and not r["running"] and r, 60, what="its end")
            assert done["end_source"] == source and done["gpu_seconds"] >= 5, done
    wait_for(lambda: get_pod(k8s, "tenant-vanish", f"gpucaas-{deleted}") is None, 60, what="the pod let go")


def test_a_spent_monthly_budget_refuses_submissions_until_raised(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "budget", gpu_hours_per_month=1)
    mark_tenancy_ready(k8s, "budget")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=30), now - timedelta(seconds=21)
    with api.client(token) as c:
        cid = submit(c, gpus=8)
        start_run(k8s, "budget", cid, node="dgx-e", pod_start=started, started=started)
        end_run(k8s, "budget", cid, pod_start=started, started=started, finished=finished)
        wait_for(lambda: (r := record_of(c, cid)) and not r["running"], 60, what="the run's end")
        with api.client() as admin:  # 72 GPU-seconds used: 0.02 GPU-hours is spent
            r = admin.patch("/v1/admin/tenancies/budget", json={"gpu_hours_per_month": 0.02})
            assert r.status_code == 200 and r.json()["gpu_hours_per_month"] == 0.02
        refused = c.post("/v1/containers", json={"image": "busybox:1.36"})
        assert refused.status_code == 403, refused.text
        body = refused.json()
        assert body["code"] == "gpu_budget_spent"
        first = now.replace(day=1, hour=0, minute=0, second=0)
        resets = (first + timedelta(days=32)).replace(day=1)
        assert f"accepted again from {stamp(resets)}" in body["detail"] and "0.02 of 0.02 GPU-hours" in body["detail"]
        assert body["resets_at"] == stamp(resets)
        with api.client() as admin:
            assert admin.patch("/v1/admin/tenancies/budget", json={"gpu_hours_per_month": 0.03}).status_code == 200
        assert c.post("/v1/containers", json={"image": "busybox:1.36"}).status_code == 202
        with api.client() as admin:
            r = admin.patch("/v1/admin/tenancies/budget", json={"clear_gpu_hours_per_month": True})
            assert r.json()["gpu_hours_per_month"] is None


def test_usage_outlives_the_retention_of_container_records(
    kubeconfig: Path,
    serve: Callable[..., ApiServer],
    database_url: str,
    k8s: Any,
) -> None:
    # containers finished more than ~1 s ago are pruned, every 0.5 s
    api = serve(database_url, kubeconfig, retention_days=1 / 86400, retention_interval_seconds=0.5)
    with api.client() as admin:
        token = new_tenancy(admin, "kept")
    mark_tenancy_ready(k8s, "kept")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=30), now - timedelta(seconds=20)
    with api.client(token) as c:
        cid = submit(c, gpus=1)
        start_run(k8s, "kept", cid, node="dgx-k", pod_start=started, started=started)
        end_run(k8s, "kept", cid, pod_start=started, started=started, finished=finished)
        wait_for(lambda: c.get(f"/v1/containers/{cid}").status_code == 404, 60, what="the container pruned")
        done = record_of(c, cid)
        assert done is not None and done["gpu_seconds"] == 10.0 and done["end_source"] == "pod"


def test_two_replicas_watching_the_same_run_record_it_once(
    kubeconfig: Path,
    serve: Callable[..., ApiServer],
    database_url: str,
    k8s: Any,
) -> None:
    one, two = serve(database_url, kubeconfig), serve(database_url, kubeconfig)
    with one.client() as admin:
        token = new_tenancy(admin, "twice")
    mark_tenancy_ready(k8s, "twice")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=50), now - timedelta(seconds=43)
    with one.client(token) as c:
        cid = submit(c, gpus=8)
        start_run(k8s, "twice", cid, node="dgx-t", pod_start=started, started=started)
        end_run(k8s, "twice", cid, pod_start=started, started=started, finished=finished)
        wait_for(lambda: (r := record_of(c, cid)) and not r["running"], 60, what="the run's end")
    for replica in (one, two):
        with replica.client(token) as c:
            report = c.get("/v1/usage", params={"group_by": "container"}).json()
        assert [r["container_id"] for r in report["data"]] == [cid] and report["total_gpu_seconds"] == 56.0
        assert _metric(replica, "twice") == 56.0


def test_a_run_that_ends_across_a_kubernetes_outage_is_charged_from_the_pods_times(
    own_cluster: Any,
    serve: Callable[..., ApiServer],
    database_url: str,
) -> None:
    k8s = own_cluster.k8s
    api = serve(database_url, own_cluster.kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "kubeout")
    mark_tenancy_ready(k8s, "kubeout")
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=40), now - timedelta(seconds=31)
    with api.client(token) as c:
        cid = submit(c, gpus=2)
        start_run(k8s, "kubeout", cid, node="dgx-o", pod_start=started, started=started)
        wait_for(lambda: record_of(c, cid), 60, what="the run's record")
        own_cluster.stop_apiserver()  # Kubernetes goes away: the watch breaks
        assert c.get("/readyz").status_code == 503
        own_cluster.start_apiserver()  # it comes back, and the kubelet reports the end
        end_run(k8s, "kubeout", cid, pod_start=started, started=started, finished=finished)
        done = wait_for(lambda: (r := record_of(c, cid)) and not r["running"] and r, 90, what="the run's end")
    assert (done["started_at"], done["finished_at"], done["gpu_seconds"]) == (stamp(started), stamp(finished), 18.0)
