"""Every bad-input case of the issue: a 4xx whose message names the field and what is allowed."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


@pytest.fixture(scope="module")
def tenant(module_api: ApiServer) -> Iterator[httpx.Client]:
    with module_api.client() as admin:
        token = new_tenancy(admin, "badinput")
    with module_api.client(token) as client:
        yield client


CASES = [
    # (id, body, status, words the detail must contain)
    ("image-invalid", {"image": "Not A Ref!"}, 422, ["image", "not a valid image reference", "allowed"]),
    ("container-url-invalid", {"container-url": "http://x/y"}, 422, ["container-url", "not a valid image reference"]),
    ("image-missing", {"gpus": 1}, 422, ["image", "required"]),
    ("image-twice", {"image": IMAGE, "container-url": "ubuntu"}, 422, ["image", "container-url"]),
    ("gpus-zero", {"image": IMAGE, "gpus": 0}, 422, ["gpus", "greater than or equal to 1"]),
    ("gpus-nine", {"image": IMAGE, "gpus": 9}, 422, ["gpus", "less than or equal to 8"]),
    ("gpus-text", {"image": IMAGE, "gpus": "two"}, 422, ["gpus", "integer"]),
    ("unknown-field", {"image": IMAGE, "privileged": True}, 422, ["'privileged'", "unknown field", "allowed fields"]),
    ("env-name", {"image": IMAGE, "env": {"1BAD": "x"}}, 422, ["env", "'1BAD'", "letters, digits and '_'"]),
    ("env-value-type", {"image": IMAGE, "env": {"A": 1}}, 422, ["env.A", "string"]),
    ("tenancy-not-dns", {"image": IMAGE, "tenancy": "Bad_Name"}, 422, ["tenancy", "DNS label"]),
    ("timeout-zero", {"image": IMAGE, "timeout_seconds": 0}, 422, ["timeout_seconds", "greater than or equal to 1"]),
    ("command-type", {"image": IMAGE, "command": "python train.py"}, 422, ["command", "list"]),
    ("body-not-object", ["image"], 422, ["body"]),
]


@pytest.mark.parametrize(("body", "status", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_container_request(tenant: httpx.Client, body: object, status: int, words: list[str]) -> None:
    r = tenant.post("/v1/containers", json=body)
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["code"] == "invalid"
    for word in words:
        assert word in payload["detail"], (word, payload["detail"])


def test_malformed_json(tenant: httpx.Client) -> None:
    r = tenant.post("/v1/containers", content=b'{"image": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert "malformed JSON" in r.json()["detail"]


def test_oversized_body(tenant: httpx.Client) -> None:
    big = {"image": IMAGE, "env": {"X": "y" * 70000}}
    r = tenant.post("/v1/containers", json=big)
    assert r.status_code == 413
    assert r.json()["code"] == "payload_too_large"
    assert "at most 65536 bytes" in r.json()["detail"]


def test_oversized_chunked_body(tenant: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"image": "ubuntu", "env": {"X": "'
        for _ in range(20):
            yield b"y" * 8192
        yield b'"}}'

    r = tenant.post("/v1/containers", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert "at most 65536 bytes" in r.json()["detail"]


ADMIN_CASES = [
    ("name-not-dns", {"name": "Not_DNS"}, ["name", "DNS label"]),
    ("name-too-long", {"name": "x" * 57}, ["name", "56"]),
    ("quota-negative", {"name": "q", "gpu_quota": -1}, ["gpu_quota", "greater than or equal to 0"]),
    ("unknown-field", {"name": "q", "colour": "red"}, ["'colour'", "unknown field", "allowed fields: gpu_quota"]),
    ("nfs-path", {"name": "q", "nfs": {"server": "10.0.0.1", "path": "relative"}}, ["nfs.path", "pattern"]),
    (
        "guarantee-above-quota",
        {"name": "q", "gpu_quota": 8, "guaranteed_gpus": 9},
        ["guaranteed_gpus 9", "gpu_quota 8"],
    ),
    ("guarantee-negative", {"name": "q", "guaranteed_gpus": -1}, ["guaranteed_gpus", "at most gpu_quota"]),
    ("guarantee-text", {"name": "q", "guaranteed_gpus": "4"}, ["guaranteed_gpus", "integer"]),
    ("weight-zero", {"name": "q", "weight": 0}, ["weight", "from 0.001 to 1000"]),
    ("weight-huge", {"name": "q", "weight": 1001}, ["weight", "from 0.001 to 1000"]),
    ("weight-text", {"name": "q", "weight": "heavy"}, ["weight"]),
]


@pytest.mark.parametrize(("body", "words"), [c[1:] for c in ADMIN_CASES], ids=[c[0] for c in ADMIN_CASES])
def test_bad_tenancy_request(module_api: ApiServer, body: dict, words: list[str]) -> None:
    with module_api.client() as admin:
        r = admin.post("/v1/admin/tenancies", json=body)
    assert r.status_code == 422, r.text
    for word in words:
        assert word in r.json()["detail"], (word, r.json()["detail"])


def test_bad_query_parameters(tenant: httpx.Client) -> None:
    r = tenant.get("/v1/containers", params={"status": "Sleeping"})
    assert r.status_code == 422
    assert "status" in r.json()["detail"] and "Queued" in r.json()["detail"]
    r = tenant.get("/v1/containers", params={"limit": 0})
    assert r.status_code == 422 and "limit" in r.json()["detail"]


def test_admin_post_without_tenancy_names_the_field(module_api: ApiServer) -> None:
    with module_api.client() as admin:
        r = admin.post("/v1/containers", json={"image": IMAGE})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("tenancy: field required")


def test_gpu_quota_beyond_eight_per_pod_is_refused_as_the_cluster_would(admin: httpx.Client) -> None:
    """The Tenancy CRD's CEL rule (gpuQuota <= 8 * podQuota), said by the API with the fix."""
    r = admin.post("/v1/admin/tenancies", json={"name": "wide", "gpu_quota": 64, "pod_quota": 4})
    assert r.status_code == 422
    assert "gpu_quota 64 needs a pod_quota of at least 8" in r.text
    assert admin.post("/v1/admin/tenancies", json={"name": "wide", "gpu_quota": 64, "pod_quota": 8}).status_code == 201
    r = admin.patch("/v1/admin/tenancies/wide", json={"pod_quota": 2})
    assert r.status_code == 422 and "needs a pod_quota of at least 8" in r.text


def test_a_guarantee_stays_within_the_quota_when_either_changes(admin: httpx.Client) -> None:
    """guaranteed_gpus is at most gpu_quota, the cap: on PATCH, of the values the tenancy would have."""
    created = admin.post("/v1/admin/tenancies", json={"name": "guaranteed", "gpu_quota": 16, "guaranteed_gpus": 8})
    assert created.status_code == 201, created.text
    assert (created.json()["guaranteed_gpus"], created.json()["weight"]) == (8, 1.0)
    lowered = admin.patch("/v1/admin/tenancies/guaranteed", json={"gpu_quota": 4})
    assert lowered.status_code == 422 and "guaranteed_gpus 8 is above gpu_quota 4" in lowered.text
    raised = admin.patch("/v1/admin/tenancies/guaranteed", json={"guaranteed_gpus": 17})
    assert raised.status_code == 422 and "guaranteed_gpus 17 is above gpu_quota 16" in raised.text
    weight = admin.patch("/v1/admin/tenancies/guaranteed", json={"weight": -2})
    assert weight.status_code == 422 and "weight" in weight.json()["detail"]
    both = admin.patch("/v1/admin/tenancies/guaranteed", json={"gpu_quota": 4, "guaranteed_gpus": 4, "weight": 2.5})
    assert both.status_code == 200, both.text
    assert {k: both.json()[k] for k in ("gpu_quota", "guaranteed_gpus", "weight")} == {
        "gpu_quota": 4,
        "guaranteed_gpus": 4,
        "weight": 2.5,
    }
    listed = admin.get("/v1/admin/tenancies").json()["data"]
    assert [(t["guaranteed_gpus"], t["weight"]) for t in listed if t["name"] == "guaranteed"] == [(4, 2.5)]
