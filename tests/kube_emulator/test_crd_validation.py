"""Custom resources are checked against their CRD's OpenAPI v3 schema: 422 Invalid with the field path."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import lease_body

LEASES = ("gpucaas.dev", "v1alpha1", "gpuleases")
TENANCIES = ("gpucaas.dev", "v1alpha1", "tenancies")

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 8},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
                "ratio": {"type": "number", "exclusiveMaximum": True, "maximum": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "port": {"x-kubernetes-int-or-string": True},
                "opt": {"type": "string", "nullable": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "when": {"type": "string", "format": "date-time"},
                "level": {"type": "integer", "default": 3},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["A", "B"]}}},
    },
}


@pytest.fixture
def things(crds: client.ApiextensionsV1Api, custom: client.CustomObjectsApi) -> client.CustomObjectsApi:
    crds.create_custom_resource_definition({
        "metadata": {"name": "things.example.dev"},
        "spec": {"group": "example.dev", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": SCHEMA}}]}})
    return custom


def _create(api: client.CustomObjectsApi, spec: dict) -> dict:
    return api.create_namespaced_custom_object("example.dev", "v1", "default", "things", {
        "apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec})


def _invalid(api: client.CustomObjectsApi, spec: dict) -> list[dict]:
    with pytest.raises(ApiException) as err:
        _create(api, spec)
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "Thing"
    return body["details"]["causes"]


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({}, "spec.size", "FieldValueRequired"),
        ({"size": "3"}, "spec.size", "FieldValueTypeInvalid"),
        ({"size": 0}, "spec.size", "FieldValueInvalid"),
        ({"size": 9}, "spec.size", "FieldValueInvalid"),
        ({"size": 1, "mode": "medium"}, "spec.mode", "FieldValueNotSupported"),
        ({"size": 1, "name": "ABC"}, "spec.name", "FieldValueInvalid"),
        ({"size": 1, "name": "a"}, "spec.name", "FieldValueInvalid"),
        ({"size": 1, "name": "abcdef"}, "spec.name", "FieldValueTooLong"),
        ({"size": 1, "ratio": 1}, "spec.ratio", "FieldValueInvalid"),
        ({"size": 1, "tags": ["a", "b", "c"]}, "spec.tags", "FieldValueTooMany"),
        ({"size": 1, "tags": ["a", 2]}, "spec.tags[1]", "FieldValueTypeInvalid"),
        ({"size": 1, "port": 1.5}, "spec.port", "FieldValueTypeInvalid"),
        ({"size": 1, "labels": {"a": 1}}, "spec.labels.a", "FieldValueTypeInvalid"),
        ({"size": 1, "when": "yesterday"}, "spec.when", "FieldValueInvalid"),
        ({"size": 1, "mode": None}, "spec.mode", "FieldValueTypeInvalid"),
    ],
)
def test_schema_violations(things: client.CustomObjectsApi, spec: dict, field: str, reason: str) -> None:
    causes = _invalid(things, spec)
    assert (field, reason) in {(c["field"], c["reason"]) for c in causes}, causes


def test_valid_object_is_defaulted_and_pruned(things: client.CustomObjectsApi) -> None:
    obj = _create(things, {"size": 2, "port": "http", "opt": None, "unknown": 1, "free": {"any": {"thing": 1}},
                           "when": "2026-01-01T00:00:00Z"})
    assert "unknown" not in obj["spec"]
    assert obj["spec"]["free"] == {"any": {"thing": 1}}
    assert obj["spec"]["level"] == 3


def test_update_and_status_are_validated(things: client.CustomObjectsApi) -> None:
    _create(things, {"size": 2})
    with pytest.raises(ApiException) as err:
        things.patch_namespaced_custom_object("example.dev", "v1", "default", "things", "t", {"spec": {"size": 100}})
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        things.patch_namespaced_custom_object_status("example.dev", "v1", "default", "things", "t",
                                                     {"status": {"phase": "C"}})
    assert err.value.status == 422
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == "status.phase"


def test_project_gpulease_schema(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*LEASES, lease_body(pciAddress="18:00.0"))
    assert err.value.status == 422
    causes = json.loads(err.value.body)["details"]["causes"]
    assert causes[0]["field"] == "spec.pciAddress" and "should match" in causes[0]["message"]
    custom.create_cluster_custom_object(*LEASES, lease_body())


def test_project_tenancy_defaults(custom: client.CustomObjectsApi) -> None:
    obj = custom.create_cluster_custom_object(*TENANCIES, {
        "apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "acme"}, "spec": {}})
    assert obj["spec"]["gpuQuota"] == 8


def test_invalid_crd_is_rejected(crds: client.ApiextensionsV1Api) -> None:
    with pytest.raises(ApiException) as err:
        crds.create_custom_resource_definition({
            "metadata": {"name": "wrong.example.dev"},
            "spec": {"group": "example.dev", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
                     "versions": [{"name": "v1", "served": True, "storage": True}]}})
    assert err.value.status == 422
