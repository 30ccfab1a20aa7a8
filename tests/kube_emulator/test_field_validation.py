"""fieldValidation: Strict refuses unknown and duplicate fields, Warn answers Warning headers, Ignore drops."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.kube_emulator.conftest import api_call

CM = "/api/v1/namespaces/default/configmaps"
TENANCIES = "/apis/gpucaas.dev/v1alpha1/tenancies"


def _cm(name: str, **extra: object) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}, **extra}


def test_strict_refuses_unknown_builtin_fields(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    status, _, body = api_call(k8s, "POST", CM, body=_cm("s", bogus=1), query={"fieldValidation": "Strict"})
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == ('ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
                               'unknown field "bogus"')
    with pytest.raises(client.ApiException):
        core.read_namespaced_config_map("s", "default")


def test_warn_drops_unknown_fields_with_a_warning(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "x", "imageTag": "y"}]}}
    status, headers, body = api_call(k8s, "POST", "/api/v1/namespaces/default/pods", body=pod,
                                     query={"fieldValidation": "Warn"})
    assert status == 201
    assert headers.getlist("Warning") == ['299 - "unknown field \\"spec.containers[0].imageTag\\""']
    assert "imageTag" not in body["spec"]["containers"][0]
    # the server's default (no parameter) is Warn too
    status, headers, _ = api_call(k8s, "POST", CM, body=_cm("w", bogus=1))
    assert status == 201 and "unknown field" in headers.get("Warning", "")


def test_ignore_drops_silently(k8s: client.ApiClient) -> None:
    status, headers, body = api_call(k8s, "POST", CM, body=_cm("i", bogus=1), query={"fieldValidation": "Ignore"})
    assert status == 201 and "Warning" not in headers and "bogus" not in body


def test_duplicate_fields(k8s: client.ApiClient) -> None:
    raw = b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}, "data": {"a": "1"}, "data": {"a": "2"}}'
    status, _, body = api_call(k8s, "POST", CM, body=raw, headers={"Content-Type": "application/json"},
                               query={"fieldValidation": "Strict"})
    assert status == 400 and 'duplicate field "data"' in body["message"]
    status, headers, body = api_call(k8s, "POST", CM, body=raw, headers={"Content-Type": "application/json"})
    assert status == 201 and body["data"] == {"a": "2"} and 'duplicate field \\"data\\"' in headers["Warning"]


def test_custom_resources_and_bad_values(k8s: client.ApiClient) -> None:
    tenancy = {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "acme"},
               "spec": {"gpuQuota": 2, "colour": "blue"}}
    status, _, body = api_call(k8s, "POST", TENANCIES, body=tenancy, query={"fieldValidation": "Strict"})
    assert status == 400 and 'unknown field "spec.colour"' in body["message"]
    status, headers, body = api_call(k8s, "POST", TENANCIES, body=tenancy, query={"fieldValidation": "Warn"})
    assert status == 201 and "colour" not in body["spec"] and "spec.colour" in headers["Warning"]
    status, _, body = api_call(k8s, "POST", CM, body=_cm("x"), query={"fieldValidation": "Loose"})
    assert status == 400 and "fieldValidation" in body["message"] and '"Strict"' in body["message"]


def test_kubectl_strict_and_warn(kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "pvc.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k, namespace: default}\nbogus: 1\n")
    proc = kubectl("apply", "-f", str(manifest), check=False)
    assert proc.returncode != 0 and 'strict decoding error: unknown field "bogus"' in proc.stderr
    proc = kubectl("apply", "--validate=warn", "-f", str(manifest))
    assert 'Warning: unknown field "bogus"' in proc.stderr and "configmap/k created" in proc.stdout


@pytest.mark.parametrize("spec", ["x", {"containers": {"a": 1}}, {"containers": [1, "x"]},
                                  {"containers": [{"name": "c", "image": 5}]}])
def test_wrongly_typed_builtin_fields_are_the_decoders_400(k8s: client.ApiClient, spec: object) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typed"}, "spec": spec}
    status, _, body = api_call(k8s, "POST", "/api/v1/namespaces/default/pods", body=pod)
    assert status == 400, body
    assert body["message"].startswith('Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal ')


def test_null_quantity_is_zero(core: client.CoreV1Api) -> None:
    status, _, body = api_call(core.api_client, "POST", "/api/v1/namespaces/default/resourcequotas",
                               body={"metadata": {"name": "q"}, "spec": {"hard": {"cpu": None}}})
    assert status == 201, body
    assert core.read_namespaced_resource_quota("q", "default").spec.hard == {"cpu": "0"}
