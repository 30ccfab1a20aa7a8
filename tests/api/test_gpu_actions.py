"""Admin GPU actions over HTTPS: quarantine and release a GPU through its GPULease."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from core import lease_states
from core.lease_store import LeaseStore, build_gpu_lease

from .conftest import new_tenancy
from .harness import ApiServer

NODE = "gpu-node-a"
PCI = "0000:18:00.0"


@pytest.fixture
def api(serve: Callable[..., ApiServer], kubeconfig: Path, k8s: client.ApiClient) -> ApiServer:
    LeaseStore(k8s).ensure(build_gpu_lease(NODE, PCI, "0x2330", 2))
    return serve("sqlite:///" + str(kubeconfig.parent / "gpus.db"), kubeconfig)


def test_quarantine_then_release_through_a_check(api: ApiServer, k8s: client.ApiClient) -> None:
    with api.client() as admin:
        r = admin.post(f"/v1/admin/gpus/{NODE}/{PCI}/quarantine", json={"reason": "fan noise"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Quarantined" and r.json()["message"] == "fan noise"
        rows = admin.get("/v1/admin/gpus", params={"node": NODE}).json()["data"]
        assert [(g["pci_address"], g["state"]) for g in rows] == [(PCI, "Quarantined")]

        r = admin.post(f"/v1/admin/gpus/{NODE}/{PCI}/release", json={})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "Releasing"  # it is checked again before anyone gets it
        lease = LeaseStore(k8s).get(f"{NODE}-0000-18-00-0")
        assert lease["status"]["reason"] == "ReleasedByAdmin"


def test_refusals_say_why(api: ApiServer, k8s: client.ApiClient) -> None:
    store = LeaseStore(k8s)
    name = f"{NODE}-0000-18-00-0"
    store.transition(name, lambda st: lease_states.allocated(st, lease_states.Holder("c-1", "tenant-a", "a")))
    with api.client() as admin:
        r = admin.post(f"/v1/admin/gpus/{NODE}/{PCI}/quarantine", json={"reason": "x"})
        assert r.status_code == 409
        assert "tenant-a/c-1" in r.json()["detail"]
        r = admin.post(f"/v1/admin/gpus/{NODE}/{PCI}/release", json={})
        assert r.status_code == 409 and "not allowed in state Leased" in r.json()["detail"]
        r = admin.post(f"/v1/admin/gpus/{NODE}/0000:99:00.0/quarantine", json={})
        assert r.status_code == 404 and "0000:99:00.0" in r.json()["detail"]
        r = admin.post(f"/v1/admin/gpus/{NODE}/not-a-pci/quarantine", json={})
        assert r.status_code == 422
        r = admin.post(f"/v1/admin/gpus/{NODE}/{PCI}/quarantine", json={"why": "unknown field"})
        assert r.status_code == 422


def test_tenants_cannot_touch_gpus(api: ApiServer) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "acme")
    with api.client(token) as tenant:
        for path in (f"/v1/admin/gpus/{NODE}/{PCI}/quarantine", f"/v1/admin/gpus/{NODE}/{PCI}/release"):
            r = tenant.post(path, json={})
            assert r.status_code in (403, 404), (path, r.status_code)
        assert tenant.get("/v1/admin/gpus").status_code in (403, 404)
