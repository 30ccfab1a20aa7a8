"""/openapi/v2 and /openapi/v3: built-in schemas (from kubernetes-validate) and every CRD's."""

from __future__ import annotations

import json

from kubernetes import client

from tests.kube_emulator.conftest import api_call

TENANCY = "dev.gpucaas.v1alpha1.Tenancy"


def test_v3_index_lists_each_group_version_with_a_hash(k8s: client.ApiClient) -> None:
    status, _, index = api_call(k8s, "GET", "/openapi/v3")
    assert status == 200
    paths = index["paths"]
    for gv in ("api/v1", "apis/apps/v1", "apis/gpucaas.dev/v1alpha1", "apis/apiextensions.k8s.io/v1"):
        assert paths[gv]["serverRelativeURL"].startswith(f"/openapi/v3/{gv}?hash=")


def test_v3_group_version_document_has_schemas_and_field_validation(k8s: client.ApiClient) -> None:
    status, _, doc = api_call(k8s, "GET", "/openapi/v3/apis/gpucaas.dev/v1alpha1")
    assert status == 200 and doc["openapi"].startswith("3.")
    tenancy = doc["components"]["schemas"][TENANCY]
    assert tenancy["x-kubernetes-group-version-kind"] == [{"group": "gpucaas.dev", "version": "v1alpha1",
                                                           "kind": "Tenancy"}]
    assert "gpuQuota" in tenancy["properties"]["spec"]["properties"]
    # kubectl's QueryParamVerifierV3 looks for fieldValidation on the PATCH operation of the kind
    patch = doc["paths"]["/apis/gpucaas.dev/v1alpha1/tenancies/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Tenancy"
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    # referenced built-in schemas come along (ObjectMeta), with v3 references
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    assert "#/$defs/" not in json.dumps(doc)


def test_v3_core_document_has_the_builtin_pod_schema(k8s: client.ApiClient) -> None:
    status, _, doc = api_call(k8s, "GET", "/openapi/v3/api/v1")
    assert status == 200
    pod = doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"][0]["kind"] == "Pod"
    spec = doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]
    assert spec["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert api_call(k8s, "GET", "/openapi/v3/apis/nothing.example/v1")[0] == 404


def test_v2_has_builtins_and_crds(k8s: client.ApiClient) -> None:
    status, _, doc = api_call(k8s, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert status == 200 and doc["swagger"] == "2.0"
    assert "io.k8s.api.apps.v1.Deployment" in doc["definitions"]
    assert TENANCY in doc["definitions"]
    assert doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"] == \
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    # only the protobuf encoding asked for: 406, as a server without it answers
    status, _, _ = api_call(k8s, "GET", "/openapi/v2",
                            headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert status == 406


def test_a_new_crd_appears_in_openapi(k8s: client.ApiClient, crds: client.ApiextensionsV1Api) -> None:
    crds.create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "size": {"type": "integer", "description": "How big."}}}}}}}]}})
    _, _, index = api_call(k8s, "GET", "/openapi/v3")
    assert "apis/example.com/v1" in index["paths"]
    _, _, doc = api_call(k8s, "GET", "/openapi/v3/apis/example.com/v1")
    assert doc["components"]["schemas"]["com.example.v1.Widget"]["properties"]["spec"]["properties"]["size"][
        "description"] == "How big."


def test_kubectl_apply_validates_and_explain_works(kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: validated, namespace: default}\n"
                        "data: {a: b}\n")
    assert "configmap/validated created" in kubectl("apply", "-f", str(manifest)).stdout
    out = kubectl("explain", "tenancies.spec").stdout
    assert "KIND:       Tenancy" in out and "gpuQuota" in out and "<integer>" in out
    out = kubectl("explain", "pods.spec.containers.resources").stdout
    assert "ResourceRequirements" in out and "limits" in out
