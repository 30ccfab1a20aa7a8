"""A paying tenant's first real workload, in the sandbox: a private image with a registry
credential, a token from a secret, 8 GPUs sized like an 8-GPU VM; no endpoint and no
database byte gives the secret back."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client

from devtools.sandbox import product, runner, tenant_view
from services.api.domain import sizing

from .conftest import Caller, allocation_mode, database_contents, wait_for, wait_status

HF_VALUE = "hf_e2e_SECRET_7d41c0b9"
NGC_KEY = "nvapi-e2e-NGC-5be2a8"
IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def _created(caller: Caller, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST until the tenancy's namespace exists (409 'not ready yet' before that) and the
    API's rights there are in effect (503 'retry later' while kube-apiserver's RBAC catches up)."""

    def attempt() -> dict[str, Any] | None:
        status, out = caller.call("POST", path, body)
        if (status == 409 and "not ready yet" in str(out)) or (status == 503 and "retry later" in str(out)):
            return None
        assert status == 201, out
        return out

    return wait_for(attempt, what=f"POST {path}")


def test_private_image_secret_env_and_gpu_sizing(
    sandbox: runner.Sandbox, tenant_factory, admin: Caller, k8s: client.ApiClient
) -> None:
    tenant = tenant_factory("paying")
    cred = _created(
        tenant, "/v1/registry-credentials", {"server": "nvcr.io", "username": "$oauthtoken", "password": NGC_KEY}
    )
    secret = _created(tenant, "/v1/secrets", {"name": "hf", "value": HF_VALUE})
    assert (cred["server"], secret["name"]) == ("nvcr.io", "hf")

    status, body = tenant.call(
        "POST", "/v1/containers", {"image": IMAGE, "gpus": 8, "env": {"HF_TOKEN": {"secret": "hf"}, "EPOCHS": "3"}}
    )
    assert status == 202, body
    cid = body["id"]
    running = wait_status(tenant, cid, "Running", "Succeeded")
    pod = k8s.sanitize_for_serialization(
        client.CoreV1Api(k8s).read_namespaced_pod(running["pod_name"], "tenant-paying")
    )
    spec, main = pod["spec"], pod["spec"]["containers"][0]

    # the pull uses the tenancy's registry credential, a dockerconfigjson Secret in its namespace
    pulls = [s["name"] for s in spec["imagePullSecrets"]]
    assert len(pulls) == 1
    pull = client.CoreV1Api(k8s).read_namespaced_secret(pulls[0], "tenant-paying")
    assert pull.type == "kubernetes.io/dockerconfigjson"
    assert json.loads(base64.b64decode(pull.data[".dockerconfigjson"]))["auths"]["nvcr.io"]["password"] == NGC_KEY
    # the variable comes from the Secret, not from a literal
    env = {e["name"]: e for e in main["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "gpucaas-secret-hf", "key": "value"}},
    }
    value = client.CoreV1Api(k8s).read_namespaced_secret("gpucaas-secret-hf", "tenant-paying").data["value"]
    assert base64.b64decode(value).decode() == HF_VALUE
    # 8 x the sandbox's per-GPU share, /dev/shm sized. Its real nodes share this machine, so the
    # sandbox sets the share small (product.REAL_NODE_SIZING: no 1 GiB hugepages); production's is
    # an HGX H100 node's (24 CPUs, 224 GiB in hugepages: tests/api check that pod spec).
    share = product.REAL_NODE_SIZING
    cpu = sizing.format_cpu(8 * sizing.parse_cpu(share["GPUCAAS_CPU_PER_GPU"]))
    memory = sizing.format_bytes(8 * sizing.parse_bytes(share["GPUCAAS_MEMORY_PER_GPU"]))
    shm = sizing.format_bytes(8 * sizing.parse_bytes(share["GPUCAAS_SHM_PER_GPU"]))
    assert (cpu, memory, shm) == ("1200m", "16Gi", "2Gi")
    gpu_limit = {"nvidia.com/gpu": "8"} if allocation_mode() == "device-plugin" else {}  # dra: a claim
    assert main["resources"]["limits"] == {**gpu_limit, "cpu": cpu, "memory": memory}
    # requests equal limits (no hugepages); kube-apiserver defaults the extended resource's request
    assert main["resources"]["requests"] == {**gpu_limit, "cpu": cpu, "memory": memory}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}} in spec["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    # the tenancy's quota covers CPU and memory too: its 16 GPUs' shares, plus the RuntimeClass's
    # Kata overhead (500m, 1Gi) of as many pods
    quota = client.CoreV1Api(k8s).list_namespaced_resource_quota("tenant-paying").items[0].spec.hard
    per_gpu_cpu = sizing.parse_cpu(share["GPUCAAS_CPU_PER_GPU"]) + 500
    per_gpu_memory = sizing.parse_bytes(share["GPUCAAS_MEMORY_PER_GPU"]) + sizing.GIB
    assert (
        (quota["limits.cpu"], quota["limits.memory"])
        == (sizing.format_cpu(16 * per_gpu_cpu), sizing.format_bytes(16 * per_gpu_memory))
        == ("10400m", "48Gi")
    )

    done = wait_status(tenant, cid, "Succeeded")
    assert done["exit_code"] == 0
    # nothing the API answers carries the value, to the tenant or the admin
    reads = [
        tenant.call("GET", p)
        for p in (
            "/v1/containers",
            f"/v1/containers/{cid}",
            f"/v1/containers/{cid}/logs",
            f"/v1/containers/{cid}/events",
            "/v1/secrets",
            "/v1/secrets/hf",
            "/v1/registry-credentials",
        )
    ]
    reads += [
        admin.call("GET", p)
        for p in ("/v1/admin/containers", "/v1/secrets?tenancy=paying", "/v1/registry-credentials?tenancy=paying")
    ]
    for status, out in reads:
        assert status == 200, out
        text = json.dumps(out)
        assert HF_VALUE not in text and NGC_KEY not in text
    assert done["env"] == {"HF_TOKEN": {"secret": "hf"}, "EPOCHS": "<redacted>"}
    status, events = tenant.call("GET", f"/v1/containers/{cid}/events")
    kinds = [e["kind"] for e in events["data"]]
    assert kinds[0] == "queued" and "partition-activated" in kinds and kinds[-1] == "finished", kinds
    # and the API's database (its file with its WAL, or its PostgreSQL database) never held it
    contents = database_contents(sandbox)
    assert any(cid.encode() in data for data in contents.values()), list(contents)  # the container's records
    for where, data in contents.items():
        for needle in (HF_VALUE, NGC_KEY):
            assert needle.encode() not in data and base64.b64encode(needle.encode()) not in data, where


@pytest.mark.any_allocation
def test_the_sandbox_hint_works_as_printed(sandbox: runner.Sandbox) -> None:
    """The curl line `gpucaas sandbox` prints for the tenant submits a container."""
    import subprocess

    done = subprocess.run(tenant_view.tenant_curl(sandbox), capture_output=True, text=True, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    body = json.loads(done.stdout)
    assert body["status"] == "Queued" and body["gpus"] == 2 and body["tenancy"] == tenant_view.DEMO_TENANCY
    assert wait_status(Caller(sandbox, sandbox.tenant_token or ""), body["id"], "Succeeded")["exit_code"] == 0
