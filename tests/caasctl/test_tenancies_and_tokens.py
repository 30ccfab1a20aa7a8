"""caasctl tenancies and tokens against the running API over HTTPS (Kubernetes cluster behind it)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from core import crds
from tests.api.harness import ApiServer

from .conftest import Caasctl


def tenancy_cr(kube: Any, name: str) -> dict[str, Any] | None:
    try:
        return client.CustomObjectsApi(kube).get_cluster_custom_object(
            crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_tenancy_lifecycle(caasctl: Caasctl, kube: Any) -> None:
    r = caasctl(
        "tenancies",
        "create",
        "acme",
        "--gpu-quota",
        "16",
        "--pod-quota",
        "4",
        "--allow-internet",
        "--nfs-server",
        "10.0.0.5",
        "--nfs-path",
        "/export/acme",
        "-o",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    created = r.json()
    assert (created["name"], created["gpu_quota"], created["pod_quota"], created["allow_internet"]) == (
        "acme",
        16,
        4,
        True,
    )
    assert created["nfs"]["server"] == "10.0.0.5" and created["nfs"]["path"] == "/export/acme"
    # the API pushed the Tenancy custom resource the controller acts on
    cr = tenancy_cr(kube, "acme")
    assert cr is not None and cr["spec"]["gpuQuota"] == 16 and cr["spec"]["nfs"]["server"] == "10.0.0.5"

    listed = caasctl("tenancies", "list", "-o", "json")
    assert listed.exit_code == 0, listed.stderr
    row = next(t for t in listed.json() if t["name"] == "acme")
    assert row["gpu_quota"] == 16 and row["active_gpus"] == 0

    table = caasctl("tenancies", "list")
    assert table.exit_code == 0, table.stderr
    for header in ("NAME", "GPU QUOTA", "GPUs IN USE", "POD QUOTA", "INTERNET", "NFS"):
        assert header in table.stdout
    line = next(ln for ln in table.stdout.splitlines() if " acme " in ln)
    assert "16" in line and "yes" in line and "10.0.0.5:/export/acme" in line

    described = caasctl("tenancies", "describe", "acme", "-o", "yaml")
    assert described.exit_code == 0, described.stderr
    assert described.yaml() == caasctl("tenancies", "describe", "acme", "-o", "json").json()
    assert described.yaml()["name"] == "acme"
    text = caasctl("tenancies", "describe", "acme")
    assert text.exit_code == 0 and "gpu_quota" in text.stdout and "acme" in text.stdout

    deleted = caasctl("tenancies", "delete", "acme", "--yes", "-o", "json")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.json() == {"deleted": "acme"}
    assert tenancy_cr(kube, "acme") is None
    assert all(t["name"] != "acme" for t in caasctl("tenancies", "list", "-o", "json").json())
    gone = caasctl("tenancies", "describe", "acme")
    assert gone.exit_code == 1
    assert gone.stderr.strip() == "error: 404: tenancy 'acme' not found"


def test_guarantee_and_weight_are_set_and_changed(caasctl: Caasctl, kube: Any) -> None:
    r = caasctl(
        "tenancies", "create", "share", "--gpu-quota", "8", "--guaranteed-gpus", "4", "--weight", "2", "-o", "json"
    )
    assert r.exit_code == 0, r.stderr
    assert (r.json()["guaranteed_gpus"], r.json()["weight"]) == (4, 2.0)
    cr = tenancy_cr(kube, "share")
    assert cr is not None and (cr["spec"]["guaranteedGpus"], cr["spec"]["weight"]) == (4, 2.0)

    updated = caasctl("tenancies", "update", "share", "--guaranteed-gpus", "8", "--weight", "0.5", "-o", "json")
    assert updated.exit_code == 0, updated.stderr
    assert (updated.json()["guaranteed_gpus"], updated.json()["weight"], updated.json()["gpu_quota"]) == (8, 0.5, 8)
    table = caasctl("tenancies", "list")
    assert "GUARANTEED" in table.stdout and "WEIGHT" in table.stdout

    over = caasctl("tenancies", "update", "share", "--gpu-quota", "4")
    assert over.exit_code == 1 and "guaranteed_gpus 8 is above gpu_quota 4" in over.stderr
    nothing = caasctl("tenancies", "update", "share")
    assert nothing.exit_code == 1 and "nothing to change" in nothing.stderr


def test_create_refuses_half_an_nfs_spec_and_a_bad_name(caasctl: Caasctl) -> None:
    r = caasctl("tenancies", "create", "half", "--nfs-server", "10.0.0.5")
    assert r.exit_code == 1 and r.stderr.strip() == "error: --nfs-server and --nfs-path go together"
    r = caasctl("tenancies", "create", "Not_A_DNS_Label")
    assert r.exit_code == 1
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: 422: ") and "name" in r.stderr


def test_tokens_issue_list_revoke(caasctl: Caasctl, api: ApiServer) -> None:
    assert caasctl("tenancies", "create", "tok", "-o", "json").exit_code == 0
    issued = caasctl("tokens", "issue", "tok", "--name", "ci", "-o", "json")
    assert issued.exit_code == 0, issued.stderr
    token = issued.json()
    assert token["tenancy"] == "tok" and token["name"] == "ci" and token["token"]

    # the secret works against the API as that tenancy
    with api.client(token["token"]) as tenant:
        assert tenant.get("/v1/containers").status_code == 200

    listed = caasctl("tokens", "list", "tok", "-o", "yaml").yaml()
    assert [(t["id"], t["name"], t["scope"]) for t in listed] == [(token["id"], "ci", "admin")]
    assert listed[0]["last_used_at"] is not None  # used just above
    assert all("token" not in t for t in listed)  # the secret is never shown again
    table = caasctl("tokens", "list", "tok")
    assert "ID" in table.stdout and token["id"] in table.stdout and token["token"] not in table.stdout
    for header in ("SCOPE", "EXPIRES", "LAST USED"):
        assert header in table.stdout

    reader = caasctl("tokens", "issue", "tok", "--scope", "read", "--expires-at", "2099-01-01T00:00:00Z", "-o", "json")
    assert reader.exit_code == 0, reader.stderr
    assert (reader.json()["scope"], reader.json()["expires_at"]) == ("read", "2099-01-01T00:00:00Z")
    with api.client(reader.json()["token"]) as tenant:
        assert tenant.get("/v1/containers").status_code == 200
        assert tenant.post("/v1/containers", json={"image": "ubuntu"}).status_code == 403
    assert caasctl("tokens", "revoke", "tok", reader.json()["id"]).exit_code == 0
    bad = caasctl("tokens", "issue", "tok", "--scope", "root")
    assert bad.exit_code == 1 and bad.stderr.startswith("error: 422: scope:")

    revoked = caasctl("tokens", "revoke", "tok", token["id"], "-o", "json")
    assert revoked.exit_code == 0, revoked.stderr
    assert revoked.json() == {"revoked": token["id"]}
    assert caasctl("tokens", "list", "tok", "-o", "json").json() == []
    with api.client(token["token"]) as tenant:
        assert tenant.get("/v1/containers").status_code == 401

    again = caasctl("tokens", "revoke", "tok", token["id"])
    assert again.exit_code == 1 and "not found" in again.stderr and len(again.stderr.splitlines()) == 1


def test_a_tenant_token_is_refused(caasctl: Caasctl, api: ApiServer) -> None:
    """An admin command with a tenant's token: the API's refusal, on one line, exit 1."""
    assert caasctl("tenancies", "create", "plain").exit_code == 0
    secret = caasctl("tokens", "issue", "plain", "-o", "json").json()["token"]
    r = caasctl("tenancies", "list", env={"GPUCAAS_TOKEN": secret})
    assert r.exit_code == 1
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: this is an admin command and the token in use is not an admin token")
    assert r.stdout == ""


def test_bad_token_is_401_on_one_line(caasctl: Caasctl) -> None:
    r = caasctl("tenancies", "list", env={"GPUCAAS_TOKEN": "not-a-token"})
    assert r.exit_code == 1
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: 401: ")
    assert r.stdout == ""
