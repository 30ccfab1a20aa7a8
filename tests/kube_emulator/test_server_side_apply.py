"""Server-side apply: managedFields, field managers, 409 conflicts unless forced."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.kube_emulator.conftest import api_call

CM = "/api/v1/namespaces/default/configmaps/settings"
APPLY = {"Content-Type": "application/apply-patch+yaml"}


def _apply(k8s: client.ApiClient, manager: str, data: dict, *, force: bool = False) -> tuple[int, object]:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": data}
    import json

    query = {"fieldManager": manager, **({"force": "true"} if force else {})}
    status, _, body = api_call(k8s, "PATCH", CM, body=json.dumps(doc), headers=APPLY, query=query)
    return status, body


def _managers(core: client.CoreV1Api) -> dict[tuple[str, str], dict]:
    cm = core.read_namespaced_config_map("settings", "default")
    return {(e.manager, e.operation): e.fields_v1 for e in cm.metadata.managed_fields or []}


def test_apply_records_managed_fields(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    status, body = _apply(k8s, "deployer", {"a": "1", "b": "2"})
    assert status == 201
    entry = body["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"], entry["apiVersion"], entry["fieldsType"]) == \
        ("deployer", "Apply", "v1", "FieldsV1")
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    assert entry["time"].endswith("Z")
    # an ordinary update is recorded as an Update by its manager, which takes the field it changed
    core.patch_namespaced_config_map("settings", "default", {"data": {"b": "3"}}, field_manager="editor")
    managers = _managers(core)
    assert managers[("editor", "Update")] == {"f:data": {"f:b": {}}}
    assert managers[("deployer", "Apply")] == {"f:data": {"f:a": {}}}


def test_conflict_then_force(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    assert _apply(k8s, "alice", {"x": "1", "y": "1"})[0] == 201
    status, body = _apply(k8s, "bob", {"x": "2"})
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.x'
    assert body["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "alice"',
                                          "field": ".data.x"}]
    assert core.read_namespaced_config_map("settings", "default").data == {"x": "1", "y": "1"}
    # the same value is shared, not a conflict
    assert _apply(k8s, "bob", {"y": "1"})[0] == 200
    status, body = _apply(k8s, "bob", {"x": "2", "y": "1"}, force=True)
    assert status == 200 and body["data"] == {"x": "2", "y": "1"}
    managers = _managers(core)
    assert managers[("alice", "Apply")] == {"f:data": {"f:y": {}}}
    assert managers[("bob", "Apply")] == {"f:data": {"f:x": {}, "f:y": {}}}


def test_fields_given_up_are_removed_unless_shared(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    _apply(k8s, "alice", {"a": "1", "b": "1", "c": "1"})
    _apply(k8s, "bob", {"c": "1"})
    assert _apply(k8s, "alice", {"a": "1"})[0] == 200
    assert core.read_namespaced_config_map("settings", "default").data == {"a": "1", "c": "1"}


def test_update_conflicts_name_the_update_manager(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    _apply(k8s, "alice", {"a": "1"})
    core.patch_namespaced_config_map("settings", "default", {"data": {"a": "2"}}, field_manager="kubectl-edit")
    status, body = _apply(k8s, "alice", {"a": "1"})
    assert status == 409
    assert body["message"].startswith('Apply failed with 1 conflict: conflict with "kubectl-edit" using v1 at ')
    assert body["message"].endswith(": .data.a")


def test_field_manager_is_required(k8s: client.ApiClient) -> None:
    status, _, body = api_call(k8s, "PATCH", CM, headers=APPLY,
                               body="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n")
    assert status == 422 and "fieldManager: Required value" in body["message"]


def test_keyed_lists_are_owned_per_item(k8s: client.ApiClient) -> None:
    import json

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    status, _, body = api_call(k8s, "PATCH", "/api/v1/namespaces/default/pods/p", body=json.dumps(pod),
                               headers=APPLY, query={"fieldManager": "me"})
    assert status == 201
    fields = body["metadata"]["managedFields"][0]["fieldsV1"]
    assert fields["f:spec"]["f:containers"] == {'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}}


def test_kubectl_server_side_apply_conflicts(kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "deploy.yaml"

    def write(replicas: int) -> str:
        manifest.write_text(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: main, image: nginx}}]
""")
        return str(manifest)

    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", write(2)).stdout
    proc = kubectl("apply", "--server-side", "--field-manager=other", "-f", write(3), check=False)
    assert proc.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas' in proc.stderr
    kubectl("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", write(3))
    out = kubectl("get", "deployment", "web", "-n", "default", "-o", "jsonpath={.spec.replicas}").stdout
    assert out == "3"


def test_garbage_managed_fields_in_an_update_do_not_break_the_server(k8s: client.ApiClient,
                                                                      core: client.CoreV1Api) -> None:
    _apply(k8s, "alice", {"a": "1"})
    cm = core.read_namespaced_config_map("settings", "default").to_dict()
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "settings", "managedFields": [{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1",
                                               "fieldsV1": {"k:{broken": {}, "f:data": {"f:a": {}}}}]},
        "data": {"a": "2"}}
    status, _, out = api_call(k8s, "PUT", "/api/v1/namespaces/default/configmaps/settings", body=body,
                              query={"fieldManager": "editor"})
    assert status == 200, out
    assert cm["metadata"]["name"] == out["metadata"]["name"]
    managers = {e["manager"] for e in out["metadata"]["managedFields"]}
    assert "editor" in managers


@pytest.mark.parametrize("doc", ["- a\n- b\n", "apiVersion: v1\nkind: ConfigMap\nmetadata: oops\n", "just text"])
def test_malformed_apply_configurations_are_400(k8s: client.ApiClient, doc: str) -> None:
    status, _, body = api_call(k8s, "PATCH", CM, body=doc, headers=APPLY, query={"fieldManager": "me"})
    assert status == 400, body
