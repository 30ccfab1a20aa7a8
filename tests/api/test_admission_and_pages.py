"""Admission at database speed and keyset pages, on both databases: concurrent
submissions never pass the GPU quota, the per-tenancy counter follows every change of
a container (cancel, pod phases), pages walk every container once,
and a token revoked through one replica stops working on another within the cache time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready, set_pod_status

IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


def in_use(admin: httpx.Client, name: str) -> int:
    return int(admin.get(f"/v1/admin/tenancies/{name}").json()["active_gpus"])


def test_concurrent_submissions_never_pass_the_quota(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "crowd", gpu_quota=8)
    codes: list[int] = []
    ids: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    def submit() -> None:
        with api_down.client(token) as c:
            start.wait()
            for _ in range(2):
                r = c.post("/v1/containers", json={"image": IMAGE})
                with lock:
                    codes.append(r.status_code)
                    if r.status_code == 202:
                        ids.append(r.json()["id"])
                    else:
                        assert r.json()["code"] == "quota_exceeded", r.text

    threads = [threading.Thread(target=submit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202] * 8 + [403] * 16
    assert in_use(admin, "crowd") == 8
    with api_down.client(token) as c:
        listed = c.get("/v1/containers", params={"status": "Queued"}).json()
        assert listed["count"] == 8 and {x["id"] for x in listed["data"]} == set(ids)
        for cid in ids[:3]:  # cancelled containers free their GPUs, once each
            assert c.delete(f"/v1/containers/{cid}").status_code == 200
            assert c.delete(f"/v1/containers/{cid}").status_code == 200
        assert in_use(admin, "crowd") == 5
        assert c.post("/v1/containers", json={"image": IMAGE, "gpus": 4}).status_code == 403
        assert c.post("/v1/containers", json={"image": IMAGE, "gpus": 2}).status_code == 202
    assert in_use(admin, "crowd") == 7


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def test_pod_phases_move_the_gpu_counter(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "phases", gpu_quota=8)
        mark_tenancy_ready(k8s, "phases")
        with api.client(token) as c:
            a = c.post("/v1/containers", json={"image": IMAGE, "gpus": 4}).json()["id"]
            b = c.post("/v1/containers", json={"image": IMAGE, "gpus": 4}).json()["id"]
            assert c.post("/v1/containers", json={"image": IMAGE}).status_code == 403
            for cid in (a, b):
                wait_for(lambda cid=cid: get_pod(k8s, "tenant-phases", f"gpucaas-{cid}"))
            set_pod_status(k8s, "tenant-phases", f"gpucaas-{a}", {"phase": "Running"})
            wait_for(lambda: c.get(f"/v1/containers/{a}").json()["status"] == "Running")
            assert in_use(admin, "phases") == 8  # Pending and Running both hold their GPUs
            set_pod_status(k8s, "tenant-phases", f"gpucaas-{a}", {"phase": "Succeeded"})
            set_pod_status(k8s, "tenant-phases", f"gpucaas-{b}", {"phase": "Failed", "reason": "Error"})
            wait_for(lambda: in_use(admin, "phases") == 0)
            assert c.post("/v1/containers", json={"image": IMAGE, "gpus": 8}).status_code == 202
            assert in_use(admin, "phases") == 8


def test_keyset_pages_walk_every_container_once(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "walk", gpu_quota=64)
    with api_down.client(token) as c:
        for _ in range(7):
            assert c.post("/v1/containers", json={"image": IMAGE}).status_code == 202
        everything = c.get("/v1/containers").json()
        assert everything["count"] == 7 and everything["next"] is None
        newest_first = [x["id"] for x in everything["data"]]
        walked, cursor, pages = [], None, 0
        while True:
            params: dict[str, Any] = {"limit": 3} | ({"after": cursor} if cursor else {})
            page = c.get("/v1/containers", params=params).json()
            assert page["count"] == 7
            walked += [x["id"] for x in page["data"]]
            pages += 1
            cursor = page["next"]
            if cursor is None:
                break
        assert walked == newest_first and pages == 3
        # a row added between pages neither repeats nor shifts the later ones
        first = c.get("/v1/containers", params={"limit": 2}).json()
        c.post("/v1/containers", json={"image": IMAGE})
        second = c.get("/v1/containers", params={"limit": 2, "after": first["next"]}).json()
        assert [x["id"] for x in second["data"]] == newest_first[2:4]
        bad = c.get("/v1/containers", params={"after": "not-a-cursor"})
        assert bad.status_code == 422 and bad.json()["detail"].startswith("after:")
    # the admin listing pages the same way
    page = admin.get("/v1/admin/containers", params={"tenancy": "walk", "limit": 5}).json()
    rest = admin.get("/v1/admin/containers", params={"tenancy": "walk", "limit": 5, "after": page["next"]}).json()
    assert len(page["data"]) == 5 and len(rest["data"]) == 3 and rest["next"] is None
    assert not {x["id"] for x in page["data"]} & {x["id"] for x in rest["data"]}


def test_a_revoked_token_stops_on_every_replica_within_the_cache_time(
    serve: Callable[..., ApiServer], postgres_url: str, dead_kubeconfig: Path
) -> None:
    one = serve(postgres_url, dead_kubeconfig, token_cache_seconds=1.0)
    two = serve(postgres_url, dead_kubeconfig, token_cache_seconds=1.0)
    with one.client() as admin:
        token = new_tenancy(admin, "revoked")
        token_id = admin.get("/v1/admin/tenancies/revoked/tokens").json()["data"][0]["id"]
        with two.client(token) as c:
            assert c.get("/v1/containers").status_code == 200  # now cached on replica two
            assert admin.delete(f"/v1/admin/tenancies/revoked/tokens/{token_id}").status_code == 204
            with one.client(token) as on_one:
                assert on_one.get("/v1/containers").status_code == 401  # at once where it was revoked
            wait_for(lambda: c.get("/v1/containers").status_code == 401)  # within the cache time elsewhere


def test_the_counter_triggers_survive_every_migration(empty_database_url: str) -> None:
    """A later migration that rebuilds ``container`` (SQLite's batch mode copies the table)
    would drop the triggers that keep ``tenancy.gpus_in_use`` and the container counts exact:
    at head they must exist."""
    from sqlalchemy import text

    from services.api.db import engines

    engine = engines.make_engine(empty_database_url)
    try:
        engines.upgrade(engine)
        with engine.connect() as conn:
            if engines.is_postgres(engine):
                names = (
                    conn.execute(
                        text("SELECT tgname FROM pg_trigger WHERE tgrelid = 'container'::regclass AND NOT tgisinternal")
                    )
                    .scalars()
                    .all()
                )
                assert set(names) == {
                    "container_counts_insert",
                    "container_counts_update",
                    "container_counts_delete",
                }  # statement-level (migration 0009)
            else:
                names = (
                    conn.execute(
                        text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'container'")
                    )
                    .scalars()
                    .all()
                )
                assert set(names) == {
                    "container_gpu_usage_insert",
                    "container_gpu_usage_update",
                    "container_gpu_usage_delete",
                }
    finally:
        engine.dispose()


def test_concurrent_retries_with_one_idempotency_key_make_one_container(
    api_down: ApiServer, admin: httpx.Client
) -> None:
    """Racing requests with the same key meet the key's unique index: one row goes in and
    every answer names it (the loser of the insert reads the winner's row)."""
    token = new_tenancy(admin, "racer", gpu_quota=8)
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def submit() -> None:
        with api_down.client(token) as c:
            start.wait()
            r = c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": "same-job-1"})
            with lock:
                answers.append(r)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in answers] == [202] * 8, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    assert in_use(admin, "racer") == 1
