"""``/status`` semantics: status writes ignore spec, main-resource writes ignore status."""

from __future__ import annotations

from kubernetes import client

from tests.kube_emulator.conftest import lease_body, pod_body

ARGS = ("gpucaas.dev", "v1alpha1", "gpuleases")


def test_custom_resource_create_drops_status(custom: client.CustomObjectsApi) -> None:
    body = lease_body()
    body["status"] = {"state": "Leased"}
    obj = custom.create_cluster_custom_object(*ARGS, body)
    assert "status" not in obj


def test_status_write_ignores_spec(custom: client.CustomObjectsApi) -> None:
    obj = custom.create_cluster_custom_object(*ARGS, lease_body())
    name = obj["metadata"]["name"]
    out = custom.patch_cluster_custom_object_status(
        *ARGS, name, {"spec": {"node": "elsewhere"}, "status": {"state": "Checking"}})
    assert out["spec"]["node"] == "node1" and out["status"]["state"] == "Checking"
    current = custom.get_cluster_custom_object(*ARGS, name)
    current["status"]["state"] = "Free"
    current["spec"]["node"] = "other"
    out = custom.replace_cluster_custom_object_status(*ARGS, name, current)
    assert out["status"]["state"] == "Free" and out["spec"]["node"] == "node1"


def test_main_write_ignores_status(custom: client.CustomObjectsApi) -> None:
    obj = custom.create_cluster_custom_object(*ARGS, lease_body())
    name = obj["metadata"]["name"]
    custom.patch_cluster_custom_object_status(*ARGS, name, {"status": {"state": "Free"}})
    out = custom.patch_cluster_custom_object(*ARGS, name, {"spec": {"model": "H100"}, "status": {"state": "Leased"}})
    assert out["spec"]["model"] == "H100" and out["status"]["state"] == "Free"


def test_builtin_pod_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    out = core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running", "podIP": "10.0.0.5"}})
    assert out.status.phase == "Running" and out.status.pod_ip == "10.0.0.5"
    out = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert out.status.phase == "Running"
    assert core.read_namespaced_pod_status("p", "default").status.phase == "Running"


def test_builtin_node_status(core: client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "n1"}})
    out = core.patch_node_status("n1", {"status": {"capacity": {"nvidia.com/gpu": "8"},
                                                  "conditions": [{"type": "Ready", "status": "True"}]}})
    assert out.status.capacity == {"nvidia.com/gpu": "8"}
    out = core.patch_node_status("n1", {"status": {"conditions": [{"type": "DiskPressure", "status": "False"}]}})
    assert {c.type for c in out.status.conditions} == {"Ready", "DiskPressure"}  # strategic merge by type


def test_resource_quota_and_pvc_status(core: client.CoreV1Api) -> None:
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}}})
    out = core.patch_namespaced_resource_quota_status("q", "default", {"status": {"hard": {"pods": "2"},
                                                                                 "used": {"pods": "1"}}})
    assert out.status.used == {"pods": "1"}
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "c"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    out = core.patch_namespaced_persistent_volume_claim_status("c", "default", {"status": {"phase": "Bound"}})
    assert out.status.phase == "Bound"
