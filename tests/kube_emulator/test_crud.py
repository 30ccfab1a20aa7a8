"""Create, get, list, replace, delete with the official client: status codes, metadata, errors."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import lease_body, pod_body


def _status(exc: ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_seeded_namespaces(core: client.CoreV1Api) -> None:
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= names
    ns = core.read_namespace("default")
    assert ns.status.phase == "Active"


def test_create_returns_201_and_stamps_metadata(core: client.CoreV1Api) -> None:
    pod, code, _ = core.create_namespaced_pod_with_http_info("default", pod_body("p1"))
    assert code == 201
    meta = pod.metadata
    assert meta.uid and meta.creation_timestamp is not None
    assert meta.namespace == "default" and meta.generation == 1
    assert int(meta.resource_version) > 0
    assert pod.status.phase == "Pending"
    got = core.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == meta.uid


def test_namespace_comes_from_url_and_mismatch_is_rejected(core: client.CoreV1Api) -> None:
    body = pod_body("p1")
    created = core.create_namespaced_pod("kube-system", body)
    assert created.metadata.namespace == "kube-system"
    body = pod_body("p2")
    body["metadata"]["namespace"] = "default"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("kube-system", body)
    assert err.value.status == 400 and _status(err.value)["reason"] == "BadRequest"


def test_generate_name(core: client.CoreV1Api) -> None:
    body = pod_body("")
    body["metadata"] = {"generateName": "worker-"}
    a = core.create_namespaced_pod("default", body)
    b = core.create_namespaced_pod("default", body)
    assert a.metadata.name.startswith("worker-") and len(a.metadata.name) == len("worker-") + 5
    assert a.metadata.name != b.metadata.name


def test_already_exists_is_409(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod_body("dup"))
    body = _status(err.value)
    assert err.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["details"]["name"] == "dup" and body["details"]["kind"] == "pods"


def test_missing_namespace_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("nope", pod_body("p"))
    body = _status(err.value)
    assert err.value.status == 404 and body["reason"] == "NotFound"
    assert body["details"] == {"name": "nope", "group": "", "kind": "namespaces"}


def test_get_missing_is_404(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("ghost", "default")
    assert err.value.status == 404 and _status(err.value)["message"] == 'pods "ghost" not found'
    with pytest.raises(ApiException) as err:
        custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", "ghost")
    assert _status(err.value)["message"] == 'gpuleases.gpucaas.dev "ghost" not found'


def test_invalid_name_is_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod_body("Bad_Name"))
    body = _status(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_invalid_label_value_is_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", pod_body("p", labels={"pci": "0000:18:00.0"}))
    assert err.value.status == 422
    assert _status(err.value)["details"]["causes"][0]["field"] == "metadata.labels"


def test_list_has_resource_version_and_items(core: client.CoreV1Api) -> None:
    for i in range(3):
        core.create_namespaced_pod("default", pod_body(f"p{i}"))
    core.create_namespaced_pod("kube-system", pod_body("other"))
    pods = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in pods.items] == ["p0", "p1", "p2"]
    assert int(pods.metadata.resource_version) >= max(int(p.metadata.resource_version) for p in pods.items)
    everywhere = core.list_pod_for_all_namespaces()
    assert len(everywhere.items) == 4


def test_list_pagination(core: client.CoreV1Api) -> None:
    for i in range(5):
        core.create_namespaced_pod("default", pod_body(f"p{i}"))
    first = core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    second = core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p2", "p3"]


def test_put_replace_and_optimistic_concurrency(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    cm = core.read_namespaced_config_map("cm", "default")
    stale_rv = cm.metadata.resource_version
    cm.data = {"a": "2"}
    updated = core.replace_namespaced_config_map("cm", "default", cm)
    assert updated.data == {"a": "2"}
    assert int(updated.metadata.resource_version) > int(stale_rv)
    assert updated.metadata.uid == cm.metadata.uid
    cm.data = {"a": "3"}
    cm.metadata.resource_version = stale_rv
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", "default", cm)
    body = _status(err.value)
    assert err.value.status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]


def test_put_name_mismatch_is_400(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", "default", {"metadata": {"name": "other"}})
    assert err.value.status == 400


def test_resource_version_increases_on_every_write(core: client.CoreV1Api) -> None:
    rvs = []
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"n": "0"}})
    rvs.append(int(cm.metadata.resource_version))
    for i in range(1, 4):
        cm = core.patch_namespaced_config_map("cm", "default", {"data": {"n": str(i)}})
        rvs.append(int(cm.metadata.resource_version))
    assert rvs == sorted(set(rvs))


def test_generation_bumps_on_spec_changes_only(custom: client.CustomObjectsApi) -> None:
    args = ("gpucaas.dev", "v1alpha1", "gpuleases")
    obj = custom.create_cluster_custom_object(*args, lease_body())
    name = obj["metadata"]["name"]
    assert obj["metadata"]["generation"] == 1
    obj = custom.patch_cluster_custom_object(*args, name, {"metadata": {"labels": {"a": "b"}}})
    assert obj["metadata"]["generation"] == 1
    obj = custom.patch_cluster_custom_object_status(*args, name, {"status": {"state": "Free"}})
    assert obj["metadata"]["generation"] == 1
    obj = custom.patch_cluster_custom_object(*args, name, {"spec": {"model": "H100"}})
    assert obj["metadata"]["generation"] == 2


def test_delete_without_finalizers_removes(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    core.delete_namespaced_pod("p", "default")
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", "default")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("p", "default")
    assert err.value.status == 404


def test_delete_preconditions(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map(
            "cm", "default", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong")))
    assert err.value.status == 409
    core.delete_namespaced_config_map(
        "cm", "default", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid)))
    assert core.list_namespaced_config_map("default").items == []


def test_delete_collection_with_selector(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("a", labels={"app": "x"}))
    core.create_namespaced_pod("default", pod_body("b", labels={"app": "y"}))
    core.delete_collection_namespaced_pod("default", label_selector="app=x")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["b"]


def test_dry_run_does_not_persist(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("dry"), dry_run="All")
    assert core.list_namespaced_pod("default").items == []


def test_secret_string_data_is_folded(core: client.CoreV1Api) -> None:
    s = core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    assert s.data == {"k": "dg=="} and s.type == "Opaque"


def test_cluster_scoped_objects(core: client.CoreV1Api) -> None:
    node = core.create_node({"metadata": {"name": "gpu-node-1", "labels": {"gpu": "true"}}})
    assert node.metadata.namespace is None
    assert [n.metadata.name for n in core.list_node(label_selector="gpu=true").items] == ["gpu-node-1"]


def test_wrong_kind_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", {"kind": "Service", "metadata": {"name": "x"}})
    assert err.value.status == 400


def test_pod_spec_is_immutable_but_images(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("p"))
    out = core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}})
    assert out.spec.containers[0].image == "busybox:2"
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "gpu-1"}})  # use pods/binding instead
    body = _status(err.value)
    assert err.value.status == 422 and body["details"]["causes"][0]["field"] == "spec"


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({}, "BestEffort"),
        ({"limits": {"nvidia.com/gpu": "1"}}, "Burstable"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ],
)
def test_pod_create_resets_status(core: client.CoreV1Api, resources: dict, qos: str) -> None:
    body = pod_body("p")
    body["spec"]["containers"][0]["resources"] = resources
    body["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    pod = core.create_namespaced_pod("default", body)
    assert pod.status.phase == "Pending" and pod.status.pod_ip is None and pod.status.qos_class == qos
