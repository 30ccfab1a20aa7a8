"""Usage across tenancies: a tenant sees only its own runs; naming another tenancy answers
exactly like naming one that does not exist; a deleted tenancy's runs are not its namesake's,
nor counted against the namesake's budget. (Admin-only /v1/admin/usage is in
test_tenancy_isolation's ADMIN_ENDPOINTS.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devtools.waiting import wait_for
from services.api.domain.models import utcnow
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import mark_tenancy_ready
from tests.api.usage_helpers import end_run, record_of, start_run, submit, usage_rows


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def _run(api: ApiServer, k8s: Any, token: str, tenancy: str, gpus: int, seconds: int) -> str:
    now = utcnow().replace(microsecond=0)
    started, finished = now - timedelta(seconds=60), now - timedelta(seconds=60 - seconds)
    with api.client(token) as c:
        cid = submit(c, gpus=gpus)
        start_run(k8s, tenancy, cid, node="dgx-i", pod_start=started, started=started)
        end_run(k8s, tenancy, cid, pod_start=started, started=started, finished=finished)
        wait_for(lambda: (r := record_of(c, cid)) and not r["running"], 60, what="the run's end")
    return cid


def test_a_tenant_sees_only_its_own_usage(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        tokens = {name: new_tenancy(admin, name) for name in ("alpha", "beta")}
    for name in tokens:
        mark_tenancy_ready(k8s, name)
    a = _run(api, k8s, tokens["alpha"], "alpha", gpus=1, seconds=2)
    b = _run(api, k8s, tokens["beta"], "beta", gpus=2, seconds=5)
    with api.client(tokens["alpha"]) as alpha:
        assert [r["container_id"] for r in usage_rows(alpha)] == [a]
        days = alpha.get("/v1/usage").json()
        assert days["tenancy"] == "alpha" and days["total_gpu_seconds"] == 2.0
        assert [r["container_id"] for r in usage_rows(alpha, tenancy="alpha")] == [a]
        for group_by in ("day", "container"):
            theirs = alpha.get("/v1/usage", params={"tenancy": "beta", "group_by": group_by})
            nowhere = alpha.get("/v1/usage", params={"tenancy": "nowhere", "group_by": group_by})
            assert theirs.status_code == nowhere.status_code == 404
            assert theirs.json()["detail"].replace("beta", "X") == nowhere.json()["detail"].replace("nowhere", "X")
        csv_text = alpha.get("/v1/usage", params={"group_by": "container"}, headers={"Accept": "text/csv"}).text
        assert a in csv_text and b not in csv_text
        assert alpha.get("/v1/admin/usage").status_code == 403
    with api.client() as admin:
        both = {
            r["container_id"] for r in admin.get("/v1/admin/usage", params={"group_by": "container"}).json()["data"]
        }
        assert both == {a, b}
        only_b = admin.get("/v1/admin/usage", params={"group_by": "container", "tenancy": "beta"}).json()
        assert [r["container_id"] for r in only_b["data"]] == [b] and only_b["total_gpu_seconds"] == 10.0


def test_a_deleted_tenancys_usage_is_not_its_namesakes(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "reborn")
    mark_tenancy_ready(k8s, "reborn")
    old = _run(api, k8s, token, "reborn", gpus=8, seconds=10)
    with api.client() as admin:
        assert admin.delete("/v1/admin/tenancies/reborn").status_code == 204
        token = new_tenancy(admin, "reborn", gpu_hours_per_month=0.01)  # 36 GPU-s; the old one used 80
    with api.client(token) as c:
        assert usage_rows(c) == [] and c.get("/v1/usage").json()["total_gpu_seconds"] == 0
        assert c.post("/v1/containers", json={"image": "busybox:1.36"}).status_code == 202  # budget not spent
    with api.client() as admin:  # the admin keeps the history
        rows = admin.get("/v1/admin/usage", params={"group_by": "container", "tenancy": "reborn"}).json()["data"]
        assert [r["container_id"] for r in rows] == [old]
