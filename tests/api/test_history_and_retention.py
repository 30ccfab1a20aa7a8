"""Deleting a tenancy cancels its containers and keeps them as history; retention prunes
finished containers (their pods first) after the configured days."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select, update

from devtools.waiting import wait_for
from services.api.domain.models import Container, utcnow
from services.api.store import retention
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_deleting_a_tenancy_cancels_its_containers_and_keeps_history(
    serve: Callable[..., ApiServer], database_url: str, kubeconfig: Path, k8s: Any
) -> None:
    api = serve(database_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "gone", gpu_quota=4)
    mark_tenancy_ready(k8s, "gone")
    with api.client(token) as t:
        running = t.post("/v1/containers", json={"image": IMAGE, "gpus": 2}, headers={"Idempotency-Key": "k"}).json()
        wait_for(lambda: get_pod(k8s, "tenant-gone", running["pod_name"]), what="the pod")
    with api.client() as admin:
        assert admin.delete("/v1/admin/tenancies/gone").status_code == 204
        # the worker deletes the pod of the cancelled container
        wait_for(lambda: get_pod(k8s, "tenant-gone", running["pod_name"]) is None, what="the pod deleted")
        history = admin.get("/v1/admin/containers", params={"tenancy": "gone"}).json()
        assert [(c["id"], c["status"]) for c in history["data"]] == [(running["id"], "Cancelled")]
        assert "tenancy was deleted" in history["data"][0]["message"]
        # the name starts clean: no old containers, no quota used, idempotency keys free again
        fresh = new_tenancy(admin, "gone", gpu_quota=4)
        assert admin.get("/v1/admin/tenancies/gone").json()["active_gpus"] == 0
    with api.client(token) as old:
        assert old.get("/v1/containers").status_code == 401
    with api.client(fresh) as t:
        assert t.get("/v1/containers").json()["count"] == 0
        assert t.get(f"/v1/containers/{running['id']}").status_code == 404
        again = t.post("/v1/containers", json={"image": IMAGE, "gpus": 4}, headers={"Idempotency-Key": "k"})
        assert again.status_code == 202 and again.json()["id"] != running["id"]


def test_retention_prunes_finished_containers_and_their_pods(
    serve: Callable[..., ApiServer], database_url: str, kubeconfig: Path, k8s: Any
) -> None:
    api = serve(database_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "old")
    mark_tenancy_ready(k8s, "old")
    with api.client(token) as t:
        ids = [t.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(3)]
        for cid in ids:
            wait_for(lambda cid=cid: t.get(f"/v1/containers/{cid}").json()["status"] == "Pending", what="pods")
        for cid in ids[:2]:
            t.delete(f"/v1/containers/{cid}")
        wait_for(lambda: all(get_pod(k8s, "tenant-old", f"gpucaas-{c}") is None for c in ids[:2]), what="cancelled")
    engine = api.app.state.engine
    with Session(engine) as session:  # the first finished 40 days ago, the second just now
        session.exec(
            update(Container).where(col(Container.id) == ids[0]).values(finished_at=utcnow() - timedelta(days=40))
        )
        session.commit()
    assert retention.prune(engine, api.app.state.kube, days=30) == 1
    with Session(engine) as session:
        left = set(session.exec(select(Container.id)).all())
    assert left == {ids[1], ids[2]}  # the recent one and the running one stay
    assert get_pod(k8s, "tenant-old", f"gpucaas-{ids[2]}") is not None
    # a long-finished container whose pod (and its logs) still exists: the pod goes first
    with Session(engine) as session:
        session.exec(
            update(Container)
            .where(col(Container.id) == ids[2])
            .values(status="Succeeded", finished_at=utcnow() - timedelta(days=31))
        )
        session.commit()
    assert retention.prune(engine, api.app.state.kube, days=30) == 1
    # deleted; the worker lets it go once it has seen its last state (its usage finalizer)
    wait_for(lambda: get_pod(k8s, "tenant-old", f"gpucaas-{ids[2]}") is None, what="the pruned pod gone")
