"""Tenant secrets and registry passwords are encrypted at rest: the sandbox's kube-apiserver
stores Secrets through its EncryptionConfiguration (secretbox), so etcd's raw keys, read with
``etcdctl`` as someone with a copy of the database would, hold no tenant value in clear."""

from __future__ import annotations

import subprocess

import pytest

from devtools.sandbox import runner

from .conftest import Caller
from .test_private_workload import _created

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation

SECRET_VALUE = "hf_at_rest_2c9e41d07b"
REGISTRY_PASSWORD = "nvapi-at-rest-8f03aa"


def _etcd_raw(sandbox: runner.Sandbox, prefix: str) -> bytes:
    assert sandbox.cluster is not None
    etcdctl = str(sandbox.cluster.bin_dir / "etcdctl")
    out = subprocess.run(
        [etcdctl, "--endpoints", sandbox.cluster.etcd_url, "get", "--prefix", prefix],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def test_etcd_holds_no_tenant_secret_in_clear(sandbox: runner.Sandbox, tenant_factory, admin: Caller) -> None:
    tenant = tenant_factory("atrest")
    _created(tenant, "/v1/secrets", {"name": "hf", "value": SECRET_VALUE})
    _created(
        tenant,
        "/v1/registry-credentials",
        {"server": "nvcr.io", "username": "$oauthtoken", "password": REGISTRY_PASSWORD},
    )
    raw = _etcd_raw(sandbox, "/registry/secrets/")
    keys = [line for line in raw.split(b"\n") if line.startswith(b"/registry/secrets/tenant-atrest/")]
    assert len(keys) >= 2, raw[:2000]  # the secret and the registry credential are there...
    assert SECRET_VALUE.encode() not in raw and REGISTRY_PASSWORD.encode() not in raw  # ...but not readable
    # etcdctl prints each key, then its value: every value of the tenancy's Secrets is sealed
    lines = raw.split(b"\n")
    ours = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.startswith(b"/registry/secrets/tenant-atrest/")]
    assert ours and all(v.startswith(b"k8s:enc:secretbox:v1:sandbox-1:") for v in ours), [v[:40] for v in ours]
    # and through the API the secret is still there (kube-apiserver decrypts it), by name only
    status, listed = tenant.call("GET", "/v1/secrets")
    assert status == 200 and [s["name"] for s in listed["data"]] == ["hf"]
    assert SECRET_VALUE not in str(listed)
