"""Every built-in kind the emulator serves takes create/get/list/watch/delete at its discovery path."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gpucaas.devtools.kube_emulator.resources import builtin_types
from tests.kube_emulator.conftest import bearer

KINDS = [rt for rt in builtin_types() if "get" in rt.verbs]


def _request(k8s: client.ApiClient, method: str, path: str, body: object = None,
             content_type: str = "application/json") -> tuple[int, dict]:
    resp = k8s.rest_client.pool_manager.request(
        method, k8s.configuration.host + path, body=json.dumps(body) if body is not None else None,
        headers={"Content-Type": content_type, **bearer(k8s)})
    return resp.status, json.loads(resp.data) if resp.data else {}


@pytest.mark.parametrize("rt", KINDS, ids=lambda rt: f"{rt.group or 'core'}/{rt.plural}")
def test_builtin_kind_round_trip(k8s: client.ApiClient, rt) -> None:
    prefix = f"/apis/{rt.group}/{rt.storage_version}" if rt.group else "/api/v1"
    coll = f"{prefix}/namespaces/default/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    name = "emulated-object"
    if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        name = "things.example.dev"
        extra = {"spec": {"group": "example.dev", "scope": "Cluster", "names": {"plural": "things", "kind": "Thing"},
                          "versions": [{"name": "v1", "served": True, "storage": True,
                                        "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    elif rt.key == ("resource.k8s.io", "resourceslices"):  # a slice must name its driver, pool and node
        extra = {"spec": {"driver": "gpu.example.dev", "nodeName": "n", "pool": {"name": "n", "resourceSliceCount": 1},
                          "devices": [{"name": "d0"}]}}
    else:
        extra = {}
    code, obj = _request(k8s, "POST", coll, {"apiVersion": rt.api_version(), "kind": rt.kind,
                                             "metadata": {"name": name, "labels": {"t": "1"}}, **extra})
    assert code == 201, obj
    assert obj["kind"] == rt.kind and obj["apiVersion"] == rt.api_version() and obj["metadata"]["uid"]
    code, got = _request(k8s, "GET", f"{coll}/{name}")
    assert code == 200 and got["metadata"]["uid"] == obj["metadata"]["uid"]
    code, listed = _request(k8s, "GET", f"{coll}?labelSelector=t%3D1")
    assert code == 200 and listed["kind"] == rt.list_kind
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]
    code, patched = _request(k8s, "PATCH", f"{coll}/{name}", {"metadata": {"labels": {"t": "2"}}},
                             "application/merge-patch+json")
    assert code == 200 and patched["metadata"]["labels"]["t"] == "2"
    watch_path = f"{prefix}/watch/" + (f"namespaces/default/{rt.plural}" if rt.namespaced else rt.plural)
    resp = k8s.rest_client.pool_manager.request("GET", k8s.configuration.host + watch_path + "?timeoutSeconds=30",
                                                preload_content=False, headers=bearer(k8s))
    first = json.loads(next(resp.stream(65536)).decode().splitlines()[0])  # the current state comes first
    resp.close()
    assert first["type"] == "ADDED" and first["object"]["kind"] == rt.kind
    code, _ = _request(k8s, "DELETE", f"{coll}/{name}")
    assert code == 200
    if rt.key not in (("", "namespaces"), ("apiextensions.k8s.io", "customresourcedefinitions")):
        assert _request(k8s, "GET", f"{coll}/{name}")[0] == 404


def test_bindings_collection_accepts_create_only(k8s: client.ApiClient) -> None:
    code, body = _request(k8s, "GET", "/api/v1/namespaces/default/bindings")
    assert code == 405 and body["reason"] == "MethodNotAllowed"


def test_namespace_finalize_subresource(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "stuck", "finalizers": ["x.dev/hold"]}})
    core.delete_namespace("stuck")
    ns = core.read_namespace("stuck")
    ns.spec.finalizers = []
    core.replace_namespace_finalize("stuck", ns)
    assert core.read_namespace("stuck").spec.finalizers in (None, [])
    core.patch_namespace("stuck", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as err:
        core.read_namespace("stuck")
    assert err.value.status == 404
