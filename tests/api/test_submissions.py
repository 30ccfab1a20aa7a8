"""Submissions over HTTPS on both databases: the seed payload, defaults, idempotency,
quota, listing, cancelling, and durability across an API restart (Kubernetes down)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer

SEED = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"}
IMAGE = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"


def test_seed_payload_from_an_admin_creates_the_tenancy_on_the_fly(admin: httpx.Client) -> None:
    r = admin.post("/v1/containers", json=SEED)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "Queued"
    assert body["tenancy"] == "landon" and body["namespace"] == "tenant-landon"
    assert body["image"] == SEED["container-url"] and body["gpus"] == 1
    assert body["pod_name"] == f"gpucaas-{body['id']}"
    assert r.headers["location"] == f"/v1/containers/{body['id']}"
    tenancy = admin.get("/v1/admin/tenancies/landon").json()
    assert tenancy["gpu_quota"] == 8 and tenancy["active_gpus"] == 1


def test_seed_payload_from_the_tenancys_own_token(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "landon")
    with api_down.client(token) as landon:
        r = landon.post("/v1/containers", json=SEED)
        assert r.status_code == 202, r.text
        r2 = landon.post(
            "/v1/containers",
            json={"image": IMAGE, "gpus": 2, "command": ["nvidia-smi"], "env": {"A": "1"}, "timeout_seconds": 60},
        )
        assert r2.status_code == 202, r2.text
        assert r2.json()["tenancy"] == "landon"  # a tenant POST without tenancy uses its own
        got = landon.get(f"/v1/containers/{r2.json()['id']}").json()
        logs = landon.get(f"/v1/containers/{r2.json()['id']}/logs")
    assert logs.status_code == 409 and "has no pod yet (status Queued)" in logs.json()["detail"]
    assert (got["gpus"], got["command"], got["env"], got["timeout_seconds"]) == (
        2,
        ["nvidia-smi"],
        {"A": "<redacted>"},
        60,
    )  # names only


def test_idempotency_key_makes_retries_safe(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "idem")
    with api_down.client(token) as c:
        first = c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": "k-1"})
        again = c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": "k-1"})
        other = c.post("/v1/containers", json={"image": IMAGE, "gpus": 2}, headers={"Idempotency-Key": "k-1"})
        fresh = c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": "k-2"})
        listed = c.get("/v1/containers").json()
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    assert fresh.json()["id"] != first.json()["id"]
    assert listed["count"] == 2


def test_gpu_quota_overrun_is_403_with_quota_and_use(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "small", gpu_quota=4)
    with api_down.client(token) as c:
        a = c.post("/v1/containers", json={"image": IMAGE, "gpus": 3, "nvlink": False})
        over = c.post("/v1/containers", json={"image": IMAGE, "gpus": 2})
        fits = c.post("/v1/containers", json={"image": IMAGE, "gpus": 1})
        assert a.status_code == fits.status_code == 202
        assert over.status_code == 403
        assert over.json() == {
            "code": "quota_exceeded",
            "detail": "GPU quota exceeded for tenancy 'small': requested 2, 3 of 4 already in use",
            "quota": 4,
            "in_use": 3,
            "requested": 2,
        }
        # a cancelled container frees its GPUs
        assert c.delete(f"/v1/containers/{a.json()['id']}").json()["status"] == "Cancelled"
        assert c.post("/v1/containers", json={"image": IMAGE, "gpus": 2}).status_code == 202
    # raising the quota lets more in
    assert admin.patch("/v1/admin/tenancies/small", json={"gpu_quota": 8}).json()["gpu_quota"] == 8
    with api_down.client(token) as c:
        assert c.post("/v1/containers", json={"image": IMAGE, "gpus": 5, "nvlink": False}).status_code == 202


def test_listing_is_paginated_and_filtered(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "pages", gpu_quota=100)
    with api_down.client(token) as c:
        ids = [c.post("/v1/containers", json={"image": IMAGE}).json()["id"] for _ in range(5)]
        c.delete(f"/v1/containers/{ids[0]}")
        page1 = c.get("/v1/containers", params={"limit": 2}).json()
        page3 = c.get("/v1/containers", params={"limit": 2, "offset": 4}).json()
        queued = c.get("/v1/containers", params={"status": "Queued"}).json()
        cancelled = c.get("/v1/containers", params={"status": "Cancelled"}).json()
    assert page1["count"] == 5 and len(page1["data"]) == 2 and len(page3["data"]) == 1
    seen = {x["id"] for x in page1["data"]} | {x["id"] for x in page3["data"]}
    assert len(seen) == 3
    assert queued["count"] == 4 and cancelled["count"] == 1
    assert cancelled["data"][0]["id"] == ids[0]


def test_cancel_is_idempotent_and_final(api_down: ApiServer, admin: httpx.Client) -> None:
    token = new_tenancy(admin, "cancel")
    with api_down.client(token) as c:
        cid = c.post("/v1/containers", json={"image": IMAGE}).json()["id"]
        first = c.delete(f"/v1/containers/{cid}")
        again = c.delete(f"/v1/containers/{cid}")
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == again.json()["status"] == "Cancelled"
    assert first.json()["finished_at"] is not None


def test_admin_tenancy_lifecycle(api_down: ApiServer, admin: httpx.Client) -> None:
    created = admin.post(
        "/v1/admin/tenancies",
        json={"name": "acme", "gpu_quota": 16, "nfs": {"server": "10.0.0.5", "path": "/export/acme"}},
    )
    assert created.status_code == 201
    assert created.json()["nfs"] == {
        "server": "10.0.0.5",
        "path": "/export/acme",
        "read_only": False,
        "capacity": "1Ti",
    }
    assert admin.post("/v1/admin/tenancies", json={"name": "acme"}).status_code == 409
    patched = admin.patch("/v1/admin/tenancies/acme", json={"allow_internet": True, "clear_nfs": True}).json()
    assert patched["allow_internet"] is True and patched["nfs"] is None and patched["gpu_quota"] == 16
    names = [t["name"] for t in admin.get("/v1/admin/tenancies").json()["data"]]
    assert "acme" in names
    assert admin.get("/v1/admin/tenancies/nope").status_code == 404
    # deleting needs Kubernetes (the Tenancy resource goes first): refused while it is down
    r = admin.delete("/v1/admin/tenancies/acme")
    assert r.status_code == 503 and r.json()["code"] == "unavailable"


def test_restart_loses_and_duplicates_nothing_while_kubernetes_is_down(
    serve: Callable[..., ApiServer], database_url: str, dead_kubeconfig: Path
) -> None:
    first = serve(database_url, dead_kubeconfig)
    with first.client() as admin:
        token = new_tenancy(admin, "durable", gpu_quota=50)
    with first.client(token) as c:
        ids = [
            c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": f"k{i}"}).json()["id"]
            for i in range(5)
        ]
    first.stop()
    second = serve(database_url, dead_kubeconfig)
    with second.client(token) as c:
        listed = c.get("/v1/containers").json()
        retried = c.post("/v1/containers", json={"image": IMAGE}, headers={"Idempotency-Key": "k3"}).json()
    assert sorted(x["id"] for x in listed["data"]) == sorted(ids)
    assert {x["status"] for x in listed["data"]} == {"Queued"}
    assert retried["id"] == ids[3]
