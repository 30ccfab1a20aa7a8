"""ResourceQuota: admission refuses creates beyond ``spec.hard`` (403); ``status.used`` follows usage."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.kube_emulator.quota import format_quantity, parse_quantity
from gpucaas.devtools.waiting import wait_for


def gpu_pod(name: str, gpus: int, **resources: str) -> dict:
    limits = {"nvidia.com/gpu": str(gpus), **resources}
    return {"metadata": {"name": name, "labels": {"gpucaas.dev/tenancy": "a"}},
            "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}


def _wait_used(core: client.CoreV1Api, key: str, value: str) -> None:
    def used() -> bool:
        q = core.read_namespaced_resource_quota("q", "default")
        return (q.status and q.status.used or {}).get(key) == value

    wait_for(used, 30, interval=0.05, what=f"status.used[{key}] == {value}")


@pytest.mark.parametrize(("text", "value"), [("8", 8), ("500m", 0.5), ("2Gi", 2 * 1024**3), ("1k", 1000),
                                             ("1.5", 1.5), ("1e3", 1000)])
def test_parse_quantity(text: str, value: float) -> None:
    assert float(parse_quantity(text)) == value


def test_format_quantity() -> None:
    assert format_quantity(parse_quantity("2Gi"), "4Gi") == "2Gi"
    assert format_quantity(parse_quantity("500m")) == "500m"
    assert format_quantity(parse_quantity("3")) == "3"


def test_gpu_quota_is_enforced(core: client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("default", {
        "metadata": {"name": "q"}, "spec": {"hard": {"requests.nvidia.com/gpu": "8", "pods": "3"}}})
    core.create_namespaced_pod("default", gpu_pod("a", 4))
    core.create_namespaced_pod("default", gpu_pod("b", 4))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", gpu_pod("c", 1))
    body = json.loads(err.value.body)
    assert err.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('pods "c" is forbidden: exceeded quota: q, requested: requests.nvidia.com/gpu=1, '
                               "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")
    _wait_used(core, "requests.nvidia.com/gpu", "8")
    core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Succeeded"}})
    _wait_used(core, "requests.nvidia.com/gpu", "4")
    core.create_namespaced_pod("default", gpu_pod("c", 4))  # a finished pod frees its GPUs and its pod count
    core.create_namespaced_pod("default", gpu_pod("d", 0))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", gpu_pod("e", 0))
    assert "exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3" in json.loads(err.value.body)["message"]


def test_quota_status_tracks_pods_and_deletion(core: client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("default", {
        "metadata": {"name": "q"}, "spec": {"hard": {"count/pods": "10", "requests.memory": "4Gi"}}})
    core.create_namespaced_pod("default", gpu_pod("a", 1, memory="1Gi"))
    _wait_used(core, "requests.memory", "1Gi")
    q = core.read_namespaced_resource_quota("q", "default")
    assert q.status.hard == {"count/pods": "10", "requests.memory": "4Gi"}
    assert q.status.used["count/pods"] == "1"
    core.delete_namespaced_pod("a", "default")
    _wait_used(core, "requests.memory", "0")


def test_compute_quota_requires_requests(core: client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "2"}}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", gpu_pod("a", 1))
    assert err.value.status == 403 and "must specify cpu" in json.loads(err.value.body)["message"]
    core.create_namespaced_pod("default", gpu_pod("b", 1, cpu="1500m"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", gpu_pod("c", 1, cpu="1"))
    assert "used: cpu=1500m, limited: cpu=2" in json.loads(err.value.body)["message"]


def test_object_count_quota(core: client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "q"},
                                                      "spec": {"hard": {"configmaps": "1"}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    assert err.value.status == 403
