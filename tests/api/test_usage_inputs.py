"""Bad input to the usage endpoints and the budget field: a 4xx naming the field and the fix."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer


@pytest.fixture(scope="module")
def tenant(module_api: ApiServer) -> str:
    with module_api.client() as admin:
        return new_tenancy(admin, "inputs")


@pytest.mark.parametrize("path", ["/v1/usage", "/v1/admin/usage"])
@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"from": "2026-11-30", "to": "2026-11-01"}, "from", "is after to"),
        ({"from": "2026-13-01"}, "from", "YYYY-MM-DD"),
        ({"to": "yesterday"}, "to", "ISO 8601"),
        ({"from": ""}, "from", "YYYY-MM-DD"),
        ({"group_by": "week"}, "group_by", "'day' or 'container'"),
        ({"tenancy": "Not_A_Name"}, "tenancy", "lowercase"),
    ],
    ids=["from-after-to", "bad-from", "bad-to", "empty-from", "bad-group-by", "bad-tenancy"],
)
def test_bad_usage_queries_name_the_field(
    module_api: ApiServer, path: str, params: dict, field: str, words: str
) -> None:
    with module_api.client() as admin:
        r = admin.get(path, params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert field in detail and words in detail, detail


def test_a_window_is_given_back_as_read(module_api: ApiServer, tenant: str) -> None:
    with module_api.client(tenant) as c:
        r = c.get("/v1/usage", params={"from": "2026-11-01", "to": "2026-11-02T12:00:00+02:00"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["from"], body["to"], body["group_by"]) == ("2026-11-01T00:00:00Z", "2026-11-02T10:00:00Z", "day")
    assert (body["data"], body["count"], body["total_gpu_seconds"]) == ([], 0, 0)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (-1, "greater than or equal to 0"),
        ("10", "valid number"),
        (True, "valid number"),
    ],
)
def test_bad_budgets_are_refused(module_api: ApiServer, value: object, words: str) -> None:
    with module_api.client() as admin:
        created = admin.post("/v1/admin/tenancies", json={"name": "budgets", "gpu_hours_per_month": value})
        updated = admin.patch("/v1/admin/tenancies/inputs", json={"gpu_hours_per_month": value})
    for r in (created, updated):
        assert r.status_code == 422 and "gpu_hours_per_month" in r.json()["detail"], r.text
        assert words in r.json()["detail"], r.json()["detail"]


def test_a_zero_budget_refuses_at_once_and_says_when_it_resets(module_api: ApiServer) -> None:
    with module_api.client() as admin:
        token = new_tenancy(admin, "nobudget", gpu_hours_per_month=0)
        assert admin.get("/v1/admin/tenancies/nobudget").json()["gpu_hours_per_month"] == 0
    with module_api.client(token) as c:
        r: httpx.Response = c.post("/v1/containers", json={"image": "busybox:1.36"})
    assert r.status_code == 403
    body = r.json()
    assert body["code"] == "gpu_budget_spent" and "0.00 of 0 GPU-hours" in body["detail"]
    assert body["resets_at"].endswith("-01T00:00:00Z") and body["resets_at"] in body["detail"]


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-02:00"])
def test_times_beyond_the_calendar_are_refused(module_api: ApiServer, value: str) -> None:
    with module_api.client() as admin:
        r = admin.get("/v1/usage", params={"from": value})
    assert r.status_code == 422 and r.json()["detail"].startswith("from: "), r.text
