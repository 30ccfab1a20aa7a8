"""Tenant volumes on real nodes, in both allocation modes: a file one container writes to a
volume is read by a later container of the same tenancy; another tenancy cannot name it; it
cannot be deleted while a container mounts it, and once deleted its storage goes too.

The sandbox's volumes come from kube-controller-manager's HostPath provisioner
(:mod:`devtools.sandbox.hostpath_volumes`): a real PersistentVolume per claim, a
directory of this machine that every node sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devtools import waiting
from devtools.sandbox import hostpath_volumes

from .conftest import TIMEOUT, Tenant, new_tenant

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation


@pytest.fixture(scope="package")
def other(admin: Tenant) -> Tenant:
    return new_tenant(admin, "othernode", 8)


def _log(tenant: Tenant, cid: str) -> str:
    status, text = tenant.call("GET", f"/v1/containers/{cid}/logs")
    assert status == 200, text
    return text


def _finished(tenant: Tenant, cid: str) -> dict[str, Any]:
    done = tenant.wait(cid, "Succeeded", "Failed", "Cancelled")
    assert done["status"] == "Succeeded", (done, _log(tenant, cid))
    return done


def test_a_file_written_to_a_volume_is_read_by_a_later_container_and_no_other_tenancy(
    tenant: Tenant, other: Tenant, k8s: client.ApiClient
) -> None:
    core = client.CoreV1Api(k8s)
    made = tenant.caasctl("volumes", "create", "shared", "--size", "64Mi")
    assert made.returncode == 0, (made.stdout, made.stderr)

    def bound() -> dict[str, Any] | None:
        status, body = tenant.call("GET", "/v1/volumes/shared")
        assert status == 200, body
        return body if body["status"] == "Bound" else None

    assert waiting.wait_for(bound, TIMEOUT, interval=0.3, what="the volume bound")["size"] == "64Mi"
    claim = core.read_namespaced_persistent_volume_claim("gpucaas-volume-shared", "tenant-realnode")
    pv = core.read_persistent_volume(claim.spec.volume_name)
    directory = Path(pv.spec.host_path.path)
    assert directory.parent == hostpath_volumes.PROVISIONER_ROOT and pv.spec.storage_class_name == "gpucaas-volumes"
    listed = tenant.caasctl("volumes", "list")
    assert listed.returncode == 0 and "shared" in listed.stdout and "64Mi" in listed.stdout, listed.stdout

    # the API's quota and the namespace's ResourceQuota say the same
    status, page = tenant.call("GET", "/v1/volumes")
    assert status == 200, page
    hard = core.read_namespaced_resource_quota("tenant-quota", "tenant-realnode").spec.hard
    assert hard["gpucaas-volumes.storageclass.storage.k8s.io/requests.storage"] == page["storage_quota"]
    assert hard["gpucaas-volumes.storageclass.storage.k8s.io/persistentvolumeclaims"] == str(page["max_volumes"])

    # a container writes a file to it (as the tenants' non-root user) ...
    wrote = tenant.caasctl(
        "run",
        "busybox:1.36",
        "--volume",
        "shared:/data",
        "--",
        "sh",
        "-c",
        "echo written-by-the-first > /data/note && id -u",
    )
    assert wrote.returncode == 0, (wrote.stdout, wrote.stderr)
    assert wrote.stdout.split()[-1] != "0"

    # ... a later one of the same tenancy reads it, mounted read-only
    status, reader = tenant.call(
        "POST",
        "/v1/containers",
        {
            "image": "busybox:1.36",
            "volumes": [{"name": "shared", "mount_path": "/in", "read_only": True}],
            "command": ["sh", "-c", "cat /in/note; touch /in/other 2>/dev/null && echo writable || echo read-only"],
        },
    )
    assert status == 202, reader
    assert reader["volumes"] == [{"name": "shared", "mount_path": "/in", "read_only": True}]
    _finished(tenant, reader["id"])
    assert _log(tenant, reader["id"]).split() == ["written-by-the-first", "read-only"]

    # another tenancy cannot name it: as if it did not exist
    for method in ("GET", "DELETE"):
        theirs, missing = other.call(method, "/v1/volumes/shared"), other.call(method, "/v1/volumes/absent")
        assert theirs[0] == missing[0] == 404, (theirs, missing)
        assert theirs[1]["detail"] == missing[1]["detail"].replace("absent", "shared")
    status, body = other.call(
        "POST",
        "/v1/containers",
        {"image": "busybox:1.36", "volumes": [{"name": "shared", "mount_path": "/steal"}], "command": ["true"]},
    )
    assert status == 422 and "volume 'shared' not found" in body["detail"], body
    stolen = other.caasctl("run", "busybox:1.36", "--volume", "shared:/steal", "--", "cat", "/steal/note")
    assert stolen.returncode == 1 and "volume 'shared' not found" in stolen.stderr, stolen.stderr
    assert other.call("GET", "/v1/volumes")[1]["data"] == []

    # in use: not deleted; once the container has ended: deleted, and its storage with it
    status, holder = tenant.call(
        "POST",
        "/v1/containers",
        {
            "image": "busybox:1.36",
            "volumes": [{"name": "shared", "mount_path": "/data"}],
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"],
        },
    )  # ends as soon as it is cancelled
    assert status == 202, holder
    tenant.wait(holder["id"], "Running")
    refused = tenant.caasctl("volumes", "delete", "shared")
    assert refused.returncode == 1 and f"in use by container(s) {holder['id']}" in refused.stderr, refused.stderr
    assert tenant.call("DELETE", f"/v1/containers/{holder['id']}")[0] == 200
    tenant.wait(holder["id"], "Cancelled")
    gone = tenant.caasctl("volumes", "delete", "shared")
    assert gone.returncode == 0, gone.stderr

    def removed() -> bool:
        return tenant.call("GET", "/v1/volumes/shared")[0] == 404 and not directory.exists()

    waiting.wait_for(removed, TIMEOUT, interval=0.3, what="the claim, its volume and its directory gone")
