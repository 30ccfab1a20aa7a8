"""Tenant volumes (``/v1/volumes``): PersistentVolumeClaims of the configured storage class in
the tenant namespace; sizes and names validated; the tenancy's storage quota kept by the API
(and carried to the Tenancy for its ResourceQuota); containers mount them by name; a volume
an active container mounts cannot be deleted; another tenancy gets 404 as for a missing one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kc
from kubernetes.client.exceptions import ApiException

from core import crds
from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import bind_pod, get_pod, mark_tenancy_ready, set_pod_status

SUCCEEDED = {
    "phase": "Succeeded",
    "containerStatuses": [
        {
            "name": "main",
            "ready": False,
            "restartCount": 0,
            "image": "busybox",
            "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-02T04:00:00Z"}},
        }
    ],
}


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig, volume_storage_quota="10Gi", max_volumes=3)


def _tenant(api: ApiServer, k8s: Any, name: str, **fields: Any) -> str:
    with api.client() as admin:
        token = new_tenancy(admin, name, **fields)
    mark_tenancy_ready(k8s, name)
    return token


def _pvc(k8s: Any, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return k8s.sanitize_for_serialization(kc.CoreV1Api(k8s).read_namespaced_persistent_volume_claim(name, ns))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_volume_is_a_claim_of_the_storage_class_in_the_tenant_namespace(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "vols")
    with api.client(token) as c:
        made = c.post("/v1/volumes", json={"name": "datasets", "size": "2048Mi"})
        assert made.status_code == 201, made.text
        assert made.json()["name"] == "datasets" and made.json()["size"] == "2Gi"
        assert made.json()["storage_class"] == "gpucaas-volumes" and made.json()["created_at"]
        pvc = _pvc(k8s, "tenant-vols", "gpucaas-volume-datasets")
        assert pvc is not None
        assert pvc["spec"]["storageClassName"] == "gpucaas-volumes"
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"
        assert pvc["metadata"]["labels"]["gpucaas.dev/volume-name"] == "datasets"
        again = c.post("/v1/volumes", json={"name": "datasets", "size": "1Gi"})
        assert again.status_code == 409 and again.json()["detail"] == "name: volume 'datasets' already exists"
        listed = c.get("/v1/volumes").json()
        assert [v["name"] for v in listed["data"]] == ["datasets"] and listed["count"] == 1
        assert (listed["storage_quota"], listed["storage_used"], listed["max_volumes"]) == ("10Gi", "2Gi", 3)
        assert c.get("/v1/volumes/datasets").json()["size"] == "2Gi"
        # another claim in the namespace (the tenancy's NFS one, say) is no volume
        kc.CoreV1Api(k8s).create_namespaced_persistent_volume_claim(
            "tenant-vols",
            {
                "metadata": {"name": "tenant-storage"},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "1Ti"}},
                },
            },
        )
        assert [v["name"] for v in c.get("/v1/volumes").json()["data"]] == ["datasets"]
        assert c.get("/v1/volumes/tenant-storage").status_code == 404
        assert c.delete("/v1/volumes/tenant-storage").status_code == 404
        assert c.delete("/v1/volumes/datasets").status_code == 204
        wait_for(lambda: c.get("/v1/volumes/datasets").status_code == 404, 30, what="the claim to go")
        assert _pvc(k8s, "tenant-vols", "tenant-storage") is not None
        assert c.delete("/v1/volumes/datasets").status_code == 404
        events = c.get("/v1/audit").json()["data"]
    assert [(e["action"], e["target"]) for e in events if e["action"].startswith("volume.")] == [
        ("volume.delete", "datasets"),
        ("volume.create", "datasets"),
    ]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"name": "Data", "size": "1Gi"}, "name", "not a valid volume name"),
        ({"name": "-data", "size": "1Gi"}, "name", "not a valid volume name"),
        ({"name": "a" * 49, "size": "1Gi"}, "name", "not a valid volume name"),
        ({"name": "data", "size": "ten gigs"}, "size", "should match pattern"),
        ({"name": "data", "size": "1Ki"}, "size", "too small; a volume holds at least 1Mi"),
        ({"name": "data", "size": "0"}, "size", "not a size"),
        ({"name": "data"}, "size", "field required"),
        ({"name": "data", "size": "1Gi", "class": "fast"}, "", "unknown field(s) 'class'"),
    ],
    ids=["upper-case", "leading-dash", "too-long", "not-a-quantity", "too-small", "zero", "no-size", "unknown-field"],
)
def test_bad_names_and_sizes_are_refused_naming_the_field(
    api: ApiServer, k8s: Any, body: dict, field: str, words: str
) -> None:
    token = _tenant(api, k8s, "badvol")
    with api.client(token) as c:
        r = c.post("/v1/volumes", json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"] and words in r.json()["detail"], r.json()["detail"]
    assert _pvc(k8s, "tenant-badvol", "gpucaas-volume-data") is None


def test_the_storage_quota_and_the_volume_count_are_kept(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "quota")
    with api.client(token) as c:
        assert c.post("/v1/volumes", json={"name": "a", "size": "6Gi"}).status_code == 201
        over = c.post("/v1/volumes", json={"name": "b", "size": "5Gi"})
        assert over.status_code == 403 and over.json()["code"] == "quota_exceeded"
        assert over.json()["detail"].startswith(
            "size: 5Gi is more than the 4Gi left of the storage quota of tenancy 'quota' (10Gi, 6Gi in use)"
        )
        assert c.post("/v1/volumes", json={"name": "b", "size": "3Gi"}).status_code == 201
        assert c.post("/v1/volumes", json={"name": "c", "size": "1Gi"}).status_code == 201
        full = c.post("/v1/volumes", json={"name": "d", "size": "1Mi"})
        assert full.status_code == 403 and full.json()["detail"].startswith("volumes: tenancy 'quota' has 3 of its 3")
    # the Tenancy carries the same allowance to the controller, which writes the ResourceQuota from it
    tenancy = kc.CustomObjectsApi(k8s).get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, "quota")
    assert tenancy["spec"]["volumes"] == {
        "storageClassName": "gpucaas-volumes",
        "storageQuota": "10Gi",
        "maxVolumes": 3,
    }


def test_containers_mount_volumes_and_a_volume_in_use_is_not_deleted(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "mounts")
    with api.client(token) as c:
        assert c.post("/v1/volumes", json={"name": "work", "size": "1Gi"}).status_code == 201
        missing = c.post(
            "/v1/containers",
            json={
                "image": "busybox",
                "volumes": [{"name": "work", "mount_path": "/work"}, {"name": "nope", "mount_path": "/nope"}],
            },
        )
        assert missing.status_code == 422
        assert missing.json()["detail"].startswith("volumes: volume 'nope' not found"), missing.text
        for bad, words in [
            ({"name": "work", "mount_path": "work"}, "not an absolute path"),
            ({"name": "work", "mount_path": "/proc/x"}, "under /proc"),
            ({"name": "work", "mount_path": "/sys"}, "under /sys"),
        ]:
            r = c.post("/v1/containers", json={"image": "busybox", "volumes": [bad]})
            assert r.status_code == 422 and "mount_path" in r.json()["detail"] and words in r.json()["detail"], r.text
        twice = c.post(
            "/v1/containers",
            json={
                "image": "busybox",
                "volumes": [{"name": "work", "mount_path": "/a"}, {"name": "work", "mount_path": "/b"}],
            },
        )
        assert twice.status_code == 422 and "given twice" in twice.json()["detail"]
        nine = c.post(
            "/v1/containers",
            json={"image": "busybox", "volumes": [{"name": "work", "mount_path": f"/m{i}"} for i in range(9)]},
        )
        assert nine.status_code == 422 and "volumes" in nine.json()["detail"]

        sub = c.post(
            "/v1/containers",
            json={"image": "busybox", "volumes": [{"name": "work", "mount_path": "/work", "read_only": True}]},
        )
        assert sub.status_code == 202, sub.text
        container = sub.json()
        assert container["volumes"] == [{"name": "work", "mount_path": "/work", "read_only": True}]
        pod = wait_for(lambda: get_pod(k8s, "tenant-mounts", container["pod_name"]), 60, what="the pod")
        assert pod["spec"]["volumes"][0] == {
            "name": "volume-0",
            "persistentVolumeClaim": {"claimName": "gpucaas-volume-work", "readOnly": True},
        }
        assert pod["spec"]["containers"][0]["volumeMounts"][0] == {
            "name": "volume-0",
            "mountPath": "/work",
            "readOnly": True,
        }
        in_use = c.delete("/v1/volumes/work")
        assert in_use.status_code == 409, in_use.text
        assert in_use.json()["detail"].startswith(f"volume 'work' is in use by container(s) {container['id']}")
        assert in_use.json()["containers"] == [container["id"]]
        # a finished container's pod would hold the claim (Kubernetes' pvc-protection): it goes with the volume
        done = c.post("/v1/containers", json={"image": "busybox", "volumes": [{"name": "work", "mount_path": "/w"}]})
        assert done.status_code == 202, done.text
        done_pod = done.json()["pod_name"]
        wait_for(lambda: get_pod(k8s, "tenant-mounts", done_pod), 60, what="the second pod")
        bind_pod(k8s, "tenant-mounts", done_pod, "node-a")
        set_pod_status(k8s, "tenant-mounts", done_pod, SUCCEEDED)
        wait_for(lambda: c.get(f"/v1/containers/{done.json()['id']}").json()["status"] == "Succeeded", 60)
        assert c.delete(f"/v1/containers/{container['id']}").status_code == 200
        assert c.delete("/v1/volumes/work").status_code == 204
        assert get_pod(k8s, "tenant-mounts", done_pod) is None or wait_for(
            lambda: get_pod(k8s, "tenant-mounts", done_pod) is None, 30, what="the finished pod deleted"
        )
        assert c.get(f"/v1/containers/{done.json()['id']}").json()["status"] == "Succeeded"


def test_another_tenancy_cannot_name_the_volume(api: ApiServer, k8s: Any) -> None:
    owner = _tenant(api, k8s, "owner")
    other = _tenant(api, k8s, "other")
    with api.client(owner) as c:
        assert c.post("/v1/volumes", json={"name": "private", "size": "1Gi"}).status_code == 201
    with api.client(other) as c:
        for method, path in [("GET", "/v1/volumes/private"), ("DELETE", "/v1/volumes/private")]:
            theirs, missing = c.request(method, path), c.request(method, path.replace("private", "absent"))
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json()["detail"] == missing.json()["detail"].replace("absent", "private")
        assert c.get("/v1/volumes").json()["data"] == []
        assert c.get("/v1/volumes", params={"tenancy": "owner"}).status_code == 404
        mount = c.post(
            "/v1/containers", json={"image": "busybox", "volumes": [{"name": "private", "mount_path": "/p"}]}
        )
        assert mount.status_code == 422 and "volume 'private' not found" in mount.json()["detail"]
    assert _pvc(k8s, "tenant-owner", "gpucaas-volume-private") is not None


def test_a_read_token_looks_but_does_not_create_or_delete(api: ApiServer, k8s: Any) -> None:
    token = _tenant(api, k8s, "scoped")
    with api.client(token) as c:
        reader = c.post("/v1/tokens", json={"name": "ro", "scope": "read"}).json()["token"]
        submitter = c.post("/v1/tokens", json={"name": "sub", "scope": "submit"}).json()["token"]
    with api.client(submitter) as c:
        assert c.post("/v1/volumes", json={"name": "v", "size": "1Gi"}).status_code == 201
    with api.client(reader) as c:
        assert c.get("/v1/volumes").status_code == 200 and c.get("/v1/volumes/v").status_code == 200
        assert c.post("/v1/volumes", json={"name": "w", "size": "1Gi"}).status_code == 403
        assert c.delete("/v1/volumes/v").status_code == 403
    with api.client(submitter) as c:
        assert c.delete("/v1/volumes/v").status_code == 204
