"""Health, readiness, metrics, OpenAPI/docs, the CLI entry, and the admin-token bootstrap."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from services.api.app import bootstrap
from services.api.db import engines
from services.api.settings import Settings
from tests.api.harness import ApiServer
from tests.core_kube.scripted import forbidden, write_kubeconfig


def test_health_and_readiness_with_kubernetes_down(module_api: ApiServer) -> None:
    with module_api.client(None) as anon:
        assert anon.get("/healthz").json() == {"status": "ok"}
        ready = anon.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["database"] == "ok"
    assert "unreachable" in ready.json()["kubernetes"]


def test_admin_inventory_with_kubernetes_down_is_503(module_api: ApiServer) -> None:
    with module_api.client() as admin:
        for path in ("/v1/admin/nodes", "/v1/admin/gpus", "/v1/admin/leases", "/v1/admin/partitions"):
            r = admin.get(path)
            assert r.status_code == 503, path
            assert r.json()["code"] == "unavailable"
            assert r.headers["Retry-After"] == "1", path  # a client may send it again (the chaos soak does)


def test_metrics_openapi_and_docs(module_api: ApiServer) -> None:
    with module_api.client() as admin:
        admin.post("/v1/containers", json={"image": "ubuntu", "tenancy": "metrics"})
        text = admin.get("/metrics").text
        spec = admin.get("/openapi.json").json()
        docs = admin.get("/docs")
    assert 'gpucaas_api_requests_total{method="POST",route="/v1/containers",status="202"}' in text
    assert "gpucaas_api_submissions_total 1.0" in text
    assert "gpucaas_api_queued_containers" in text
    oldest = re.search(r"^gpucaas_api_oldest_queued_container_age_seconds (\S+)$", text, re.M)
    assert oldest is not None and float(oldest.group(1)) >= 0
    for path in (
        "/v1/containers",
        "/v1/containers/{container_id}",
        "/v1/containers/{container_id}/logs",
        "/v1/admin/tenancies",
        "/v1/admin/tenancies/{name}/tokens",
        "/v1/admin/containers",
        "/v1/admin/nodes",
        "/v1/admin/gpus",
        "/v1/admin/leases",
        "/v1/admin/partitions",
        "/v1/volumes",
        "/v1/volumes/{volume_name}",
        "/v1/endpoint-auth",
    ):
        assert path in spec["paths"], path
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_tls_is_served_and_plain_http_is_refused(module_api: ApiServer) -> None:
    assert module_api.base_url.startswith("https://")
    try:
        httpx.get(f"http://127.0.0.1:{module_api.port}/healthz", timeout=5)
    except httpx.HTTPError:
        pass
    else:  # pragma: no cover
        raise AssertionError("plain HTTP answered on the TLS port")


def test_generated_admin_token_is_returned_once_and_stored_hashed(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", admin_token_file=tmp_path / "admin-token")
    engine = engines.make_engine(settings.database_url)
    try:
        token = bootstrap(engine, settings)
        assert token and token.startswith("gpc_")
        assert (tmp_path / "admin-token").read_text().strip() == token
        assert (tmp_path / "admin-token").stat().st_mode & 0o077 == 0
        assert bootstrap(engine, settings) is None  # not again
    finally:
        engine.dispose()


def test_cli_options_have_env_vars() -> None:
    from gpucaas.cli import app

    out = CliRunner().invoke(app, ["api", "--help"], env={"COLUMNS": "200"}).output
    for env in (
        "GPUCAAS_HOST",
        "GPUCAAS_PORT",
        "GPUCAAS_TLS_CERT",
        "GPUCAAS_TLS_KEY",
        "GPUCAAS_DATABASE_URL",
        "GPUCAAS_KUBECONFIG",
    ):
        assert env in out


def test_cli_refuses_half_a_tls_pair(tmp_path: Path) -> None:
    from gpucaas.cli import app

    result = CliRunner().invoke(app, ["api", "--tls-cert", str(tmp_path / "c.pem")])
    assert result.exit_code != 0
    assert "tls_cert and tls_key must be given together" in result.output


def test_without_any_kubernetes_configuration_the_api_still_runs(tmp_path: Path) -> None:
    import pytest

    from core.kube import Unavailable as KubeUnavailable
    from services.api.kube import Kube

    kube = Kube(tmp_path / "missing-kubeconfig")
    with pytest.raises(KubeUnavailable, match="no usable Kubernetes configuration"):
        kube.ping()
    with pytest.raises(KubeUnavailable):
        kube.upsert_tenancy({"metadata": {"name": "x"}, "spec": {}})
    kube.close()


def test_placeholder_admin_tokens_are_refused() -> None:
    import pytest
    from pydantic import ValidationError

    for weak in ("changeme", "short"):
        with pytest.raises(ValidationError, match="at least 16 characters"):
            Settings(admin_token=weak)


def test_readiness_tells_forbidden_from_unreachable(
    serve: Any, database_url: str, tmp_path: Path, scripted: Any, dead_kubeconfig: Path
) -> None:
    """A 403 on the readiness call names the identity and the permission it lacks."""
    user = "system:serviceaccount:gpucaas-system:gpucaas-api"
    srv = scripted([(403, forbidden(user, "list", "tenancies", "gpucaas.dev"))])
    api = serve(database_url, write_kubeconfig(tmp_path / "kubeconfig-forbidden", srv.url), run_worker=False)
    with api.client(None) as anon:
        ready = anon.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["kubernetes"] == f"forbidden: {user} cannot list tenancies.gpucaas.dev"
    assert srv.requests and srv.requests[0].startswith("/apis/gpucaas.dev/v1alpha1/tenancies")  # a call the role grants

    down = serve(database_url, dead_kubeconfig, run_worker=False)
    with down.client(None) as anon:
        ready = anon.get("/readyz")
    assert ready.json()["kubernetes"].startswith("Kubernetes unreachable at http://127.0.0.1:9")


def test_an_admins_tenancy_write_tries_kubernetes_once_and_leaves_the_rest_to_the_worker(
    serve: Any, database_url: str, tmp_path: Path, scripted: Any
) -> None:
    """Creating or changing a tenancy pushes its custom resource at once only if Kubernetes
    answers: a 503 gets no retry inside the admin's request (the worker upserts it later)."""
    srv = scripted([(503, {"kind": "Status", "status": "Failure", "reason": "ServiceUnavailable", "code": 503})])
    api = serve(database_url, write_kubeconfig(tmp_path / "kubeconfig-503", srv.url), run_worker=False)
    with api.client() as admin:
        created = admin.post("/v1/admin/tenancies", json={"name": "once", "gpu_quota": 4})
        assert created.status_code == 201, created.text
        tried = [p for p in srv.requests if "/tenancies/once" in p]
        assert len(tried) == 1, srv.requests
        changed = admin.patch("/v1/admin/tenancies/once", json={"gpu_quota": 8})
        assert changed.status_code == 200, changed.text
        assert changed.json()["gpu_quota"] == 8
    assert len([p for p in srv.requests if "/tenancies/once" in p]) == 2, srv.requests
