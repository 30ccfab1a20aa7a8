"""Discovery: /version, /api, /apis, group and group/version resource lists, CRDs appearing and going."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.waiting import wait_for
from tests.kube_emulator.conftest import bearer
from tests.kube_emulator.test_kopf import WIDGET_CRD


def _resources(k8s: client.ApiClient, path: str) -> dict[str, dict]:
    """The raw APIResourceList at ``path`` (through the client's own connection pool)."""
    resp = k8s.rest_client.pool_manager.request("GET", k8s.configuration.host + path, headers=bearer(k8s))
    assert resp.status == 200, path
    return {r["name"]: r for r in json.loads(resp.data)["resources"]}


def test_version(k8s: client.ApiClient) -> None:
    info = client.VersionApi(k8s).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.")
    assert "emulator" in info.git_version


def test_core_api_versions(k8s: client.ApiClient) -> None:
    assert client.CoreApi(k8s).get_api_versions().versions == ["v1"]


def test_core_resources(k8s: client.ApiClient) -> None:
    res = {r.name: r for r in client.CoreV1Api(k8s).get_api_resources().resources}
    for name in ("namespaces", "pods", "pods/status", "pods/log", "pods/binding", "pods/eviction", "nodes",
                 "nodes/status", "events", "services", "endpoints", "configmaps", "secrets", "serviceaccounts",
                 "resourcequotas", "resourcequotas/status", "limitranges", "persistentvolumes",
                 "persistentvolumeclaims", "persistentvolumeclaims/status"):
        assert name in res, name
    assert res["pods"].namespaced and not res["nodes"].namespaced
    assert res["pods"].kind == "Pod" and "watch" in res["pods"].verbs
    assert res["pods/log"].verbs == ["get"]


@pytest.mark.parametrize(
    ("group", "version", "names"),
    [
        ("events.k8s.io", "v1", ["events"]),
        ("networking.k8s.io", "v1", ["networkpolicies"]),
        ("coordination.k8s.io", "v1", ["leases"]),
        ("node.k8s.io", "v1", ["runtimeclasses"]),
        ("apiextensions.k8s.io", "v1", ["customresourcedefinitions", "customresourcedefinitions/status"]),
        ("apps", "v1", ["deployments", "daemonsets"]),
        ("gpucaas.dev", "v1alpha1", ["tenancies", "tenancies/status", "gpuleases", "gpuleases/status",
                                     "fabricstates", "fabricstates/status"]),
    ],
)
def test_group_resources(k8s: client.ApiClient, group: str, version: str, names: list[str]) -> None:
    groups = {g.name: g for g in client.ApisApi(k8s).get_api_versions().groups}
    assert group in groups and groups[group].preferred_version.version == version
    res = _resources(k8s, f"/apis/{group}/{version}")
    for name in names:
        assert name in res, name


def test_project_crds_are_cluster_scoped_with_names(k8s: client.ApiClient) -> None:
    res = _resources(k8s, "/apis/gpucaas.dev/v1alpha1")
    assert res["gpuleases"]["kind"] == "GPULease" and res["gpuleases"]["namespaced"] is False
    assert res["gpuleases"]["shortNames"] == ["gl"] and res["gpuleases"]["singularName"] == "gpulease"


def test_crd_appears_in_discovery_and_goes(k8s: client.ApiClient, crds: client.ApiextensionsV1Api) -> None:
    crds.create_custom_resource_definition(WIDGET_CRD)
    crd = crds.read_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    assert crd.status.accepted_names.kind == "Widget"
    group = client.ApisApi(k8s).get_api_versions().groups
    assert "example.gpucaas.dev" in {g.name for g in group}
    res = _resources(k8s, "/apis/example.gpucaas.dev/v1")
    assert res["widgets"]["namespaced"] is True and "widgets/status" in res
    crds.delete_custom_resource_definition(WIDGET_CRD["metadata"]["name"])
    url = k8s.configuration.host + "/apis/example.gpucaas.dev/v1"
    wait_for(lambda: k8s.rest_client.pool_manager.request("GET", url, headers=bearer(k8s)).status == 404, 30,
             interval=0.05, what="the deleted CRD's group version gone from discovery")


def test_multi_version_crd(k8s: client.ApiClient, crds: client.ApiextensionsV1Api,
                           custom: client.CustomObjectsApi) -> None:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    crds.create_custom_resource_definition({
        "metadata": {"name": "gadgets.example.dev"},
        "spec": {"group": "example.dev", "scope": "Cluster", "names": {"kind": "Gadget", "plural": "gadgets"},
                 "versions": [{"name": "v1beta1", "served": True, "storage": False, "schema": schema},
                              {"name": "v1", "served": True, "storage": True, "schema": schema}]}})
    custom.create_cluster_custom_object("example.dev", "v1beta1", "gadgets", {
        "apiVersion": "example.dev/v1beta1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"a": 1}})
    assert custom.get_cluster_custom_object("example.dev", "v1", "gadgets", "g")["apiVersion"] == "example.dev/v1"
    assert custom.get_cluster_custom_object("example.dev", "v1beta1", "gadgets", "g")["apiVersion"] == \
        "example.dev/v1beta1"
    groups = {g.name: g for g in client.ApisApi(k8s).get_api_versions().groups}
    assert groups["example.dev"].preferred_version.version == "v1"


def test_unknown_paths_are_404_status(k8s: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as err:
        custom.list_cluster_custom_object("nope.dev", "v1", "things")
    assert err.value.status == 404
    resp = k8s.rest_client.pool_manager.request("GET", k8s.configuration.host + "/api/v2", headers=bearer(k8s))
    assert resp.status == 404
