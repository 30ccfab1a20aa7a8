"""Hostile input never reaches the database or a node: bounded integers, no coercion,
no control characters, reserved environment names, internal image registries, and a
PATCH racing a DELETE. Each answer is a 4xx in the one error model."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from services.api.domain import images
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


@pytest.fixture
def tenant(api_down: ApiServer) -> Iterator[httpx.Client]:
    with api_down.client() as admin:
        token = new_tenancy(admin, "hostile")
    with api_down.client(token) as client:
        yield client


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) >= {"code", "detail"}, body
    return body["detail"]


# --- bounded integers and no coercion (both databases) ---------------------------


def test_offsets_beyond_the_bound_are_422_not_500(tenant: httpx.Client, admin: httpx.Client) -> None:
    for offset in (2**63, 2**64 + 5, 10**30, 1_000_000_001):
        for client, path in ((tenant, "/v1/containers"), (admin, "/v1/admin/containers")):
            assert "offset" in _error(client.get(path, params={"offset": offset}), 422)
    r = tenant.get("/v1/containers", params={"offset": 1_000_000_000})
    assert r.status_code == 200 and r.json()["data"] == []


def test_gpus_and_timeouts_take_json_integers_only(tenant: httpx.Client) -> None:
    for value in ("4", True, 4.0, "1e1", None):
        detail = _error(tenant.post("/v1/containers", json={"image": IMAGE, "gpus": value}), 422)
        assert "gpus" in detail and "integer" in detail, (value, detail)
    assert "timeout_seconds" in _error(
        tenant.post("/v1/containers", json={"image": IMAGE, "timeout_seconds": "60"}), 422
    )
    assert tenant.get("/v1/containers").json()["count"] == 0  # nothing stored


def test_tenancy_numbers_and_flags_are_not_coerced(admin: httpx.Client) -> None:
    for field, value in (("gpu_quota", "8"), ("pod_quota", True), ("allow_internet", "true"), ("allow_internet", 1)):
        detail = _error(admin.post("/v1/admin/tenancies", json={"name": "coerced", field: value}), 422)
        assert field in detail
    assert admin.get("/v1/admin/tenancies/coerced").status_code == 404


# --- control characters: path, query and body --------------------------------------


def test_control_characters_in_paths_are_refused(tenant: httpx.Client) -> None:
    for path in ("/v1/containers/ab%00cd", "/v1/containers/%1b[31m", "/v1/containers/x%7f"):
        assert "control characters" in _error(tenant.get(path), 400)


def test_nul_in_admin_paths_and_queries_is_refused(admin: httpx.Client) -> None:
    new_tenancy(admin, "nulled")
    assert _error(admin.delete("/v1/admin/tenancies/nulled/tokens/tok%00x"), 400)
    assert _error(admin.get("/v1/admin/containers", params={"tenancy": "a\x00b"}), 400)
    assert _error(admin.get("/v1/admin/gpus", params={"node": "n\x00"}), 400)


def test_control_characters_in_container_bodies_are_refused(tenant: httpx.Client) -> None:
    for body in (
        {"image": IMAGE, "env": {"A": "x\x00y"}},
        {"image": IMAGE, "args": ["ok", "bad\x00"]},
        {"image": IMAGE, "command": ["\x1b[2J"]},
    ):
        detail = _error(tenant.post("/v1/containers", json=body), 422)
        assert "control characters" in detail, detail
    assert tenant.get("/v1/containers").json()["count"] == 0


def test_tabs_and_newlines_in_free_text_are_kept(tenant: httpx.Client) -> None:
    r = tenant.post(
        "/v1/containers", json={"image": IMAGE, "args": ["-c", "echo a\n\techo b"], "env": {"SCRIPT": "line1\r\nline2"}}
    )
    assert r.status_code == 202, r.text
    assert r.json()["args"] == ["-c", "echo a\n\techo b"]


def test_nul_in_token_names_and_tenancy_fields_is_refused(admin: httpx.Client) -> None:
    new_tenancy(admin, "tokname")
    assert "control characters" in _error(admin.post("/v1/admin/tenancies/tokname/tokens", json={"name": "a\x00"}), 422)
    assert "control characters" in _error(
        admin.post("/v1/admin/tenancies", json={"name": "nfsnul", "nfs": {"server": "nfs.example", "path": "/x\x00"}}),
        422,
    )


# --- reserved environment names ------------------------------------------------------


def test_env_names_that_steer_the_runtime_are_refused(tenant: httpx.Client) -> None:
    for name in (
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_VISIBLE_DEVICES",
        "KUBERNETES_SERVICE_HOST",
        "ld_preload",
    ):
        detail = _error(tenant.post("/v1/containers", json={"image": IMAGE, "env": {name: "x", "OK": "y"}}), 422)
        assert repr(name) in detail
        for prefix in ("LD_*", "NVIDIA_*", "CUDA_VISIBLE_*", "KUBERNETES_*"):
            assert prefix in detail
    assert tenant.get("/v1/containers").json()["count"] == 0

    r = tenant.post("/v1/containers", json={"image": IMAGE, "env": {"CUDA_HOME": "/usr/local/cuda", "LDFLAGS": "-O2"}})
    assert r.status_code == 202, r.text


# --- images ----------------------------------------------------------------------------


INTERNAL_IMAGES = [
    "169.254.169.254/x:1",
    "127.0.0.1:5000/x:1",
    "kubernetes.default.svc/x:1",
    "kubernetes.default/x:1",
    "10.0.0.7/team/x:1",
    "192.168.1.2:443/x",
    "[::1]:5000/x:1",
    "[fe80::1]/x",
    "localhost:5000/x:1",
    "registry.kube-system.svc.cluster.local/x:1",
    "metadata.google.internal/x:1",
    "2852039166:80/x:1",
    "0xa9.0xfe.0xa9.0xfe/x:1",
    "docker.example.com:2375/x:1",
    "node.example.com:10250/x:1",
    "0.0.0.0/x",
]
PUBLIC_IMAGES = [
    "ubuntu:24.04",
    "nvcr.io/nvidia/cuda:12.5.0-base",
    "ghcr.io/acme/train:1",
    "registry.example.com:5000/team/x:1",
    "8.8.8.8/x:1",
    "library/busybox",
    "2852039166/x:1",
]  # no '.' or ':' in the first component: a docker.io path


def test_internal_registries_are_refused_public_ones_accepted(tenant: httpx.Client) -> None:
    for image in INTERNAL_IMAGES:
        detail = _error(tenant.post("/v1/containers", json={"image": image}), 422)
        assert detail.startswith("image: ") and "allow-list" in detail, (image, detail)
        detail = _error(tenant.post("/v1/containers", json={"container-url": image}), 422)
        assert detail.startswith("container-url: "), (image, detail)
    assert tenant.get("/v1/containers").json()["count"] == 0
    for image in PUBLIC_IMAGES:
        assert tenant.post("/v1/containers", json={"image": image}).status_code == 202, image


def test_the_allow_list_admits_a_private_registry(serve, sqlite_url, dead_kubeconfig) -> None:
    server = serve(sqlite_url, dead_kubeconfig, image_registry_allowlist=["10.0.0.5:5000", "registry.corp.internal"])
    with server.client() as admin:
        token = new_tenancy(admin, "private")
    with server.client(token) as t:
        assert t.post("/v1/containers", json={"image": "10.0.0.5:5000/team/x:1"}).status_code == 202
        assert t.post("/v1/containers", json={"image": "registry.corp.internal/x:1"}).status_code == 202
        assert t.post("/v1/containers", json={"image": "10.0.0.5:5001/team/x:1"}).status_code == 422
        assert t.post("/v1/containers", json={"image": "169.254.169.254/x:1"}).status_code == 422


def test_registry_parsing_follows_docker_normalisation() -> None:
    assert images.registry_of("ubuntu") is None
    assert images.registry_of("library/ubuntu:1") is None  # docker.io
    assert images.registry_of("localhost/x") == ("localhost", None)
    assert images.registry_of("[::1]:5000/x") == ("::1", 5000)
    assert images.registry_of("Reg.Example.com.:443/x") == ("reg.example.com", 443)


# --- races -------------------------------------------------------------------------------


def test_patch_racing_delete_is_404_or_200_never_500(serve, database_url, kubeconfig) -> None:
    # Kubernetes up: the DELETEs go through. The rate limits are not the subject here: 96
    # admin requests in a burst can pass the per-token 50/s (test_limits covers those).
    api = serve(database_url, kubeconfig, rate_limit_token="", rate_limit_tenancy="")
    statuses: list[int] = []
    with api.client() as admin:
        for round_ in range(12):
            name = f"race{round_}"
            assert admin.post("/v1/admin/tenancies", json={"name": name}).status_code == 201
            barrier = threading.Barrier(3)

            def patch(n: str = name, barrier: threading.Barrier = barrier) -> None:
                with api.client() as c:
                    barrier.wait()
                    for q in range(3):
                        statuses.append(c.patch(f"/v1/admin/tenancies/{n}", json={"gpu_quota": q}).status_code)

            def delete(n: str = name, barrier: threading.Barrier = barrier) -> None:
                with api.client() as c:
                    barrier.wait()
                    statuses.append(c.delete(f"/v1/admin/tenancies/{n}").status_code)

            threads = [threading.Thread(target=patch), threading.Thread(target=patch), threading.Thread(target=delete)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert set(statuses) <= {200, 204, 404, 409}, statuses
    assert statuses.count(204) == 12
    assert 500 not in statuses
