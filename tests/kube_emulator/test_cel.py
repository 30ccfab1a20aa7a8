"""CEL x-kubernetes-validations: self, oldSelf, message/messageExpression, fieldPath, reason."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.kube_emulator.conftest import api_call


def _tenancy(name: str, **spec: object) -> dict:
    return {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": name}, "spec": spec}


def test_tenancy_quota_rule_refuses_with_cause(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(client.ApiException) as err:
        custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies",
                                            _tenancy("greedy", gpuQuota=64, podQuota=2))
    assert err.value.status == 422
    import json

    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.gpuQuota",
        "message": 'Invalid value: "object": gpuQuota 64 needs a podQuota of at least 8: '
                   "one pod holds at most 8 GPUs (a DGX H100 node)"}]
    # the rule sees defaults: podQuota defaults to 50, so 64 GPUs are fine
    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", _tenancy("ok", gpuQuota=64))


def test_transition_rule_keeps_status_namespace(k8s: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", _tenancy("acme", gpuQuota=1))
    path = "/apis/gpucaas.dev/v1alpha1/tenancies/acme/status"
    merge = {"Content-Type": "application/merge-patch+json"}
    assert api_call(k8s, "PATCH", path, body={"status": {"namespace": "tenant-acme"}}, headers=merge)[0] == 200
    status, _, body = api_call(k8s, "PATCH", path, body={"status": {"namespace": "elsewhere"}}, headers=merge)
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "status.namespace"
    assert "status.namespace is immutable" in body["message"]
    assert api_call(k8s, "PATCH", path, body={"status": {"phase": "Ready"}}, headers=merge)[0] == 200


def _widget_crd(rules: list[dict]) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "properties": {"spec": {
                             "type": "object", "x-kubernetes-validations": rules,
                             "properties": {"min": {"type": "integer"}, "max": {"type": "integer"},
                                            "owner": {"type": "string"}}}}}}}]}}


def test_reason_message_expression_and_old_self(crds: client.ApiextensionsV1Api,
                                                custom: client.CustomObjectsApi) -> None:
    crds.create_custom_resource_definition(_widget_crd([
        {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' > max'",
         "fieldPath": ".min"},
        {"rule": "!has(oldSelf.owner) || self.owner == oldSelf.owner", "message": "owner is immutable",
         "reason": "FieldValueForbidden", "fieldPath": ".owner"},
        {"rule": "self.max < 100"},
    ]))
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"min": 5, "max": 200, "owner": "a"}}
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    import json

    causes = json.loads(err.value.body)["details"]["causes"]
    assert {"reason": "FieldValueInvalid", "field": "spec", "message":
            'Invalid value: "object": failed rule: self.max < 100'} in causes
    body["spec"]["max"] = 1
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    assert json.loads(err.value.body)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec.min", "message": 'Invalid value: "object": min 5 > max'}]
    body["spec"]["max"] = 10
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "w", {"spec": {"owner": "b"}})
    assert json.loads(err.value.body)["details"]["causes"] == [
        {"reason": "FieldValueForbidden", "field": "spec.owner", "message": "Forbidden: owner is immutable"}]


def test_crd_with_a_rule_that_does_not_compile_is_refused(crds: client.ApiextensionsV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        crds.create_custom_resource_definition(_widget_crd([{"rule": "self.min <<>> 3"}]))
    assert err.value.status == 422 and "compilation failed" in err.value.body


def test_kubectl_refuses_a_tenancy_breaking_a_rule(kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "t.yaml"
    manifest.write_text("apiVersion: gpucaas.dev/v1alpha1\nkind: Tenancy\nmetadata: {name: greedy}\n"
                        "spec: {gpuQuota: 64, podQuota: 2}\n")
    proc = kubectl("apply", "-f", str(manifest), check=False)
    assert proc.returncode != 0
    assert 'The Tenancy "greedy" is invalid: spec.gpuQuota: Invalid value: "object": gpuQuota 64 needs a podQuota' \
        in proc.stderr


def test_gpulease_device_identity_is_immutable(custom: client.CustomObjectsApi) -> None:
    from tests.kube_emulator.conftest import lease_body

    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", lease_body())
    custom.patch_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", "node1-0000-18-00-0",
                                       {"spec": {"model": "H100"}})
    with pytest.raises(client.ApiException) as err:
        custom.patch_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", "node1-0000-18-00-0",
                                           {"spec": {"pciAddress": "0000:19:00.0"}})
    assert err.value.status == 422 and "spec.node and spec.pciAddress cannot change" in err.value.body


def test_rules_ratchet_on_unchanged_values(crds: client.ApiextensionsV1Api, custom: client.CustomObjectsApi) -> None:
    """KEP-4008: a rule added after an object was stored does not block writes that leave it unchanged."""
    crds.create_custom_resource_definition(_widget_crd([]))
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"min": 5, "max": 200, "owner": "a"}}
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", body)
    crd = crds.read_custom_resource_definition("widgets.example.com")
    crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].x_kubernetes_validations = [
        client.V1ValidationRule(rule="self.max < 100")]
    crds.replace_custom_resource_definition("widgets.example.com", crd)
    # the spec is unchanged: the failing rule is ratcheted
    patched = custom.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "w",
                                                    {"metadata": {"labels": {"team": "x"}}})
    assert patched["metadata"]["labels"] == {"team": "x"}
    # the spec changes: the rule applies again
    with pytest.raises(client.ApiException) as err:
        custom.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "w", {"spec": {"owner": "b"}})
    import json

    assert json.loads(err.value.body)["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": 'Invalid value: "object": failed rule: self.max < 100'}]
