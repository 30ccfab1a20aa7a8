"""Sizing that follows the GPUs: CPU, memory (1 GiB hugepages when Kata backs guests with
them) and /dev/shm per container from a per-GPU share, tenant overrides within the
tenancy's quota, CPU and memory quotas on the Tenancy; NVLink sizes."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kc

from devtools.waiting import wait_for
from services.api.domain import sizing
from services.api.settings import Settings
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready

ROOT = Path(__file__).resolve().parents[2]
SHARE = sizing.Share(
    cpu_milli=24000,
    memory_bytes=224 * 2**30,
    shm_bytes=32 * 2**30,
    hugepages=True,
    overhead_cpu_milli=500,
    overhead_memory_bytes=2**30,
)


@pytest.mark.parametrize(
    ("gpus", "overrides", "cpu", "memory", "shm"),
    [
        (1, {}, 24000, 224 * 2**30, 32 * 2**30),
        (8, {}, 192000, 1792 * 2**30, 256 * 2**30),
        (2, {"cpu": "10", "memory": "100Gi", "shm_size": "8Gi"}, 10000, 100 * 2**30, 8 * 2**30),
        (1, {"memory": "4500Mi"}, 24000, 5 * 2**30, 5 * 2**30),  # whole hugepages; shm within memory
        (1, {"cpu": "1500m"}, 1500, 224 * 2**30, 32 * 2**30),
    ],
    ids=["one-gpu-share", "eight-gpu-share", "overrides", "memory-rounded-to-hugepages", "millicores"],
)
def test_size_for(gpus: int, overrides: dict, cpu: int, memory: int, shm: int) -> None:
    size = sizing.size_for(SHARE, gpus, **overrides)
    assert (size.cpu_milli, size.memory_bytes, size.shm_bytes) == (cpu, memory, shm)


def test_resources_with_and_without_hugepages() -> None:
    with_pages = sizing.size_for(SHARE, 8).resources("nvidia.com/gpu", 8)
    assert with_pages == {
        "limits": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "1792Gi", "hugepages-1Gi": "1792Gi"},
        "requests": {"cpu": "192", "memory": "1Gi", "hugepages-1Gi": "1792Gi"},
    }
    plain = sizing.size_for(sizing.Share(4000, 2**34, 2**30, hugepages=False), 2).resources("nvidia.com/gpu", 2)
    assert plain == {
        "limits": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32Gi"},
        "requests": {"cpu": "8", "memory": "32Gi"},
    }


@pytest.mark.parametrize(
    ("text", "fn", "expected"),
    [
        ("16", sizing.parse_cpu, 16000),
        ("12.5", sizing.parse_cpu, 12500),
        ("500m", sizing.parse_cpu, 500),
        ("1Ti", sizing.parse_bytes, 2**40),
        ("512Mi", sizing.parse_bytes, 2**29),
        ("2G", sizing.parse_bytes, 2 * 10**9),
    ],
)
def test_quantities(text: str, fn: Callable[[str], int], expected: int) -> None:
    assert fn(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "1e3", "abc", "0", "1.5m", "12Gi"])
def test_bad_cpu_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="allowed: a CPU count"):
        sizing.parse_cpu(text)


def test_the_hugepages_setting_is_one_value_for_the_chart_the_api_and_kata() -> None:
    kata = tomllib.loads((ROOT / "deploy/kata/configuration-qemu-nvidia-gpu.toml").read_text())
    values = yaml.safe_load((ROOT / "deploy/helm/gpucaas/values.yaml").read_text())
    default = Settings.model_fields["kata_hugepages"].default
    assert kata["hypervisor"]["qemu"]["enable_hugepages"] is values["sizing"]["kataHugepages"] is default
    deployment = (ROOT / "deploy/helm/gpucaas/templates/api/deployment.yaml").read_text()
    for env in (
        "GPUCAAS_KATA_HUGEPAGES",
        "GPUCAAS_CPU_PER_GPU",
        "GPUCAAS_MEMORY_PER_GPU",
        "GPUCAAS_SHM_PER_GPU",
        "GPUCAAS_KATA_OVERHEAD_CPU",
        "GPUCAAS_KATA_OVERHEAD_MEMORY",
    ):
        assert re.search(rf"name: {env}\b", deployment), env


def test_bad_sizing_settings_stop_the_start_with_the_variable_named() -> None:
    with pytest.raises(ValueError, match=r"memory_per_gpu \(GPUCAAS_MEMORY_PER_GPU\)"):
        Settings(memory_per_gpu="lots")


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def test_an_eight_gpu_container_gets_eight_shares_and_the_tenancy_quota_covers_cpu_and_memory(
    api: ApiServer, k8s: Any
) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "sized", gpu_quota=16)
    tenancy = mark_tenancy_ready(k8s, "sized")
    assert (tenancy["spec"]["cpuQuota"], tenancy["spec"]["memoryQuota"]) == ("392", "3600Gi")  # 16 x (share + overhead)
    with api.client(token) as c:
        big = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 8}).json()["id"]
        small = c.post(
            "/v1/containers", json={"image": "ubuntu", "gpus": 2, "cpu": "8", "memory": "64Gi", "shm_size": "16Gi"}
        ).json()
        assert (small["cpu"], small["memory"], small["shm_size"]) == ("8", "64Gi", "16Gi")
        pod = wait_for(lambda: get_pod(k8s, "tenant-sized", f"gpucaas-{big}"))
        other = wait_for(lambda: get_pod(k8s, "tenant-sized", f"gpucaas-{small['id']}"))
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"] == {
        "nvidia.com/gpu": "8",
        "cpu": "192",
        "memory": "1792Gi",
        "hugepages-1Gi": "1792Gi",
    }
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}} in pod["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    assert other["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "8"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in other["spec"]["volumes"]


@pytest.mark.parametrize(
    ("body", "start"),
    [
        ({"gpus": 1, "cpu": "1000"}, "cpu: 1000 is more than tenancy 'tight' may use (98 CPUs)"),
        ({"gpus": 1, "memory": "2Ti"}, "memory: 2Ti is more than tenancy 'tight' may use (900Gi)"),
        ({"gpus": 1, "memory": "8Gi", "shm_size": "16Gi"}, "body: shm_size: 16Gi is more than the container's memory"),
        ({"gpus": 1, "shm_size": "300Gi"}, "shm_size: 300Gi is more than the container's memory (224Gi)"),
        ({"gpus": 1, "cpu": "lots"}, "cpu: 'lots' is not a CPU quantity"),
        ({"gpus": 1, "memory": "12"}, "memory: 12 is too little; a GPU VM needs at least 4Gi"),
        ({"gpus": 3}, "body: gpus: 3 GPUs cannot be joined by NVLink (NVLink partitions have 1, 2, 4, 8 GPUs)"),
        ({"gpus": 3, "nvlink": False}, None),
    ],
    ids=[
        "cpu-over-quota",
        "memory-over-quota",
        "shm-over-memory",
        "shm-over-share",
        "bad-cpu",
        "too-little-memory",
        "three-gpus-need-nvlink-false",
        "three-without-nvlink",
    ],
)
def test_sizing_and_nvlink_input(api_down: ApiServer, admin: Any, body: dict, start: str | None) -> None:
    token = new_tenancy(admin, "tight", gpu_quota=4)
    with api_down.client(token) as c:
        r = c.post("/v1/containers", json={"image": "ubuntu", **body})
    if start is None:
        assert r.status_code == 202, r.text
    else:
        assert r.status_code == 422 and r.json()["detail"].startswith(start), r.text


def test_without_hugepages_memory_is_plain(
    kubeconfig: Path, serve: Callable[..., ApiServer], sqlite_url: str, k8s: Any
) -> None:
    api = serve(sqlite_url, kubeconfig, kata_hugepages=False, cpu_per_gpu="8", memory_per_gpu="64Gi", shm_per_gpu="8Gi")
    with api.client() as admin:
        token = new_tenancy(admin, "plain")
    mark_tenancy_ready(k8s, "plain")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 4}).json()["id"]
        pod = wait_for(lambda: get_pod(k8s, "tenant-plain", f"gpucaas-{cid}"))
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "4", "cpu": "32", "memory": "256Gi"},
        # the API server fills in the extended resource's request from its limit
        "requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
    }
    quota = kc.CustomObjectsApi(k8s).get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "plain")["spec"]
    assert (quota["cpuQuota"], quota["memoryQuota"]) == ("68", "520Gi")  # 8 x (share + overhead)
