"""PATCH: JSON patch, JSON merge patch, strategic merge patch (built-ins only), apply; errors."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import lease_body, pod_body

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
LEASES = ("gpucaas.dev", "v1alpha1", "gpuleases")


def _deployment(k8s: client.ApiClient) -> client.AppsV1Api:
    apps = client.AppsV1Api(k8s)
    apps.create_namespaced_deployment("default", {
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [
                {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "img:1"},
            ]}}}})
    return apps


def _containers(patch: list) -> dict:
    return {"spec": {"template": {"spec": {"containers": patch}}}}


def test_strategic_merge_merges_containers_by_name(k8s: client.ApiClient) -> None:
    apps = _deployment(k8s)
    out = apps.patch_namespaced_deployment("d", "default", _containers([{"name": "b", "image": "img:2"}]))
    assert [(c.name, c.image) for c in out.spec.template.spec.containers] == [("a", "img:1"), ("b", "img:2")]
    out = apps.patch_namespaced_deployment("d", "default", _containers([
        {"name": "a", "env": [{"name": "Y", "value": "2"}]}]))
    assert [e.name for e in out.spec.template.spec.containers[0].env] == ["X", "Y"]
    assert out.metadata.generation == 3


def test_strategic_merge_delete_directive(k8s: client.ApiClient) -> None:
    apps = _deployment(k8s)
    out = apps.patch_namespaced_deployment("d", "default", _containers([{"name": "b", "$patch": "delete"}]))
    assert [c.name for c in out.spec.template.spec.containers] == ["a"]


def test_merge_patch_replaces_lists(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    apps = _deployment(k8s)
    out = apps.patch_namespaced_deployment("d", "default", _containers([{"name": "only", "image": "i"}]),
                                           _content_type=MERGE)
    assert [c.name for c in out.spec.template.spec.containers] == ["only"]
    core.create_namespaced_pod("default", pod_body("p"))
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"k": "v"}}}, _content_type=MERGE)
    out = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"k": None}}}, _content_type=MERGE)
    assert not out.metadata.labels


def test_json_patch(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    out = core.patch_namespaced_config_map("c", "default", [
        {"op": "add", "path": "/data/b", "value": "2"},
        {"op": "replace", "path": "/data/a", "value": "0"},
    ])
    assert out.data == {"a": "0", "b": "2"}


def test_json_patch_test_op_failure_is_422(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", "default", [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "not-" + cm.metadata.resource_version},
            {"op": "add", "path": "/data", "value": {"x": "y"}},
        ])
    assert err.value.status == 422


def test_patch_with_stale_resource_version_conflicts(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    core.patch_namespaced_config_map("c", "default", {"data": {"x": "1"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "c", "default", {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"x": "2"}})
    assert err.value.status == 409


def test_custom_resources_reject_strategic_merge(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(*LEASES, lease_body("l"))
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(*LEASES, "l", {"spec": {"model": "x"}}, _content_type=SMP)
    assert err.value.status == 415
    out = custom.patch_cluster_custom_object(*LEASES, "l", [{"op": "add", "path": "/spec/model", "value": "H100"}],
                                             _content_type=JSON)
    assert out["spec"]["model"] == "H100"


def test_patch_missing_object_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("ghost", "default", {"data": {}})
    assert err.value.status == 404


def test_unknown_patch_content_type_is_415(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", "default", {"data": {}}, _content_type="application/json")
    assert err.value.status == 415


def test_no_op_patch_keeps_resource_version(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    out = core.patch_namespaced_config_map("c", "default", {"data": {"a": "1"}})
    assert out.metadata.resource_version == cm.metadata.resource_version


def test_apply_patch_creates_then_merges(k8s: client.ApiClient, kube_emulator) -> None:
    import urllib3

    http = urllib3.PoolManager()
    auth = {"Authorization": f"Bearer {kube_emulator.admin_token}"}
    url = f"{kube_emulator.url}/api/v1/namespaces/default/configmaps/applied?fieldManager=test"
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: '1'\n"
    r = http.request("PATCH", url, body=body, headers={"Content-Type": "application/apply-patch+yaml", **auth})
    assert r.status == 201
    # an apply configuration must name its apiVersion and kind, as on a real server
    r = http.request("PATCH", url, body=b"data:\n  b: '2'\n", headers={"Content-Type": "application/apply-patch+yaml", **auth})
    assert r.status == 400
    # the same manager applying a configuration without `a` gives `a` up: it is removed
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  b: '2'\n"
    r = http.request("PATCH", url, body=body, headers={"Content-Type": "application/apply-patch+yaml", **auth})
    assert r.status == 200
    assert client.CoreV1Api(k8s).read_namespaced_config_map("applied", "default").data == {"b": "2"}
    http.clear()
