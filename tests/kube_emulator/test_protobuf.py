"""Content types: protobuf bodies are refused with 415; protobuf-or-JSON Accept gets JSON.

client-go sends built-in objects as protobuf when its rest.Config says so (kubectl >= 1.32
does); it has no fallback to JSON after a 415 for protobuf (only for CBOR:
rest.requestClientContentConfigProvider.UnsupportedMediaType), so the emulator, which has
no protobuf codec, answers 415 with the real server's wording. The stock kubectl on these
machines (the Cloud SDK dispatcher) runs the kubectl release matching the server's
reported version (1.31), which sends JSON.
"""

from __future__ import annotations

import json

from kubernetes import client

from tests.kube_emulator.conftest import api_call


def test_protobuf_body_is_415_and_json_is_answered_to_protobuf_accept(k8s: client.ApiClient) -> None:
    status, _, body = api_call(k8s, "POST", "/api/v1/namespaces", body=b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace",
                               headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    assert "application/json" in body["message"]
    status, headers, body = api_call(k8s, "GET", "/api/v1/namespaces/default",
                                     headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 200 and body["metadata"]["name"] == "default"
    assert headers["Content-Type"].startswith("application/json")


def test_yaml_bodies_are_accepted(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    status, _, body = api_call(k8s, "POST", "/api/v1/namespaces/default/configmaps",
                               body="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {k: v}\n",
                               headers={"Content-Type": "application/yaml"})
    assert status == 201, body
    assert core.read_namespaced_config_map("y", "default").data == {"k": "v"}


def test_kubectl_create_namespace_and_deployment(kubectl, core: client.CoreV1Api, k8s: client.ApiClient) -> None:  # type: ignore[no-untyped-def]
    assert "namespace/team-a created" in kubectl("create", "namespace", "team-a").stdout
    assert core.read_namespace("team-a").status.phase == "Active"
    out = kubectl("create", "deployment", "d", "--image=x", "-n", "team-a").stdout
    assert "deployment.apps/d created" in out
    dep = client.AppsV1Api(k8s).read_namespaced_deployment("d", "team-a")
    assert dep.spec.template.spec.containers[0].image == "x"
    assert json.loads(kubectl("get", "deployment", "d", "-n", "team-a", "-o", "json").stdout)["metadata"]["name"] == "d"
