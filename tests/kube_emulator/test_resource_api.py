"""resource.k8s.io/v1 in the emulator: the kinds a DRA driver and the scheduler use, validated.

Checked with the official Python client (its typed ResourceV1Api) and the limits of the
v1 types (ResourceSlice devices and counters, exactly one node choice, devices or counters).
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpucaas.core import dra
from gpucaas.core.platforms import DGX_H100
from services.dra_driver.slices import PublishedGpu, build_slices


def _board() -> list[PublishedGpu]:
    return [PublishedGpu(pid, bdf) for pid, bdf in DGX_H100.physical_id_to_bdf().items()]


def _objects(k8s: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s)


def test_a_node_publishes_its_slices_and_they_are_listed_by_node_and_driver(k8s: client.ApiClient) -> None:
    objs = _objects(k8s)
    for node in ("node-a", "node-b"):
        for s in build_slices(node, _board(), binding_conditions=True):
            objs.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", s)
    mine = objs.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                           field_selector=f"spec.nodeName=node-a,spec.driver={dra.DRIVER}")
    assert sorted(i["metadata"]["name"] for i in mine["items"]) == ["node-a-gpucaas-counters",
                                                                    "node-a-gpucaas-partitions"]
    typed = client.ResourceV1Api(k8s).list_resource_slice(field_selector="spec.nodeName=node-b")
    assert len(typed.items) == 2
    for size in (1, 2, 4, 8):
        objs.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", dra.device_class(size))
    classes = client.ResourceV1Api(k8s).list_device_class()
    assert {c.metadata.name for c in classes.items} == {dra.device_class_name(s) for s in (1, 2, 4, 8)}


def _refused(create, body) -> list[dict]:
    with pytest.raises(ApiException) as err:
        create(body)
    assert err.value.status == 422
    import json

    return json.loads(err.value.body)["details"]["causes"]


def test_slices_over_the_upstream_limits_are_refused(k8s: client.ApiClient) -> None:
    objs = _objects(k8s)

    def create(body):
        return objs.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", body)

    counters, parts = build_slices("node-a", _board())
    both = {**parts, "metadata": {"name": "both"},
            "spec": {**parts["spec"], "sharedCounters": counters["spec"]["sharedCounters"]}}
    causes = _refused(create, both)
    assert any("only one of devices and sharedCounters" in c["message"] for c in causes)

    too_many = {**parts, "metadata": {"name": "many"}, "spec": {**parts["spec"], "devices": [
        {**parts["spec"]["devices"][0], "name": f"d{i}"} for i in range(65)]}}
    causes = _refused(create, too_many)
    assert {"field": "spec.devices", "reason": "FieldValueTooMany",
            "message": "Too many: 65: must have at most 64 items"} in causes

    nowhere = {**parts, "metadata": {"name": "nowhere"}, "spec": {k: v for k, v in parts["spec"].items()
                                                                  if k != "nodeName"}}
    assert any(c["field"] == "spec" and "exactly one of `nodeName`" in c["message"]
               for c in _refused(create, nowhere))

    bad_attr = {**parts, "metadata": {"name": "attr"}, "spec": {**parts["spec"], "devices": [
        {**parts["spec"]["devices"][0], "attributes": {"gpus": {"int": 2, "string": "2"}}}]}}
    assert any("exactly one of int, bool, string or version" in c["message"] for c in _refused(create, bad_attr))


def test_claims_need_a_device_class_and_a_positive_count(k8s: client.ApiClient) -> None:
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": "t"}})
    objs = _objects(k8s)

    def create(body):
        return objs.create_namespaced_custom_object("resource.k8s.io", "v1", "t", "resourceclaims", body)

    good = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "ok"},
            "spec": {"devices": {"requests": [dra.claim_request(4)]}}}
    assert create(good)["metadata"]["uid"]
    bad = {**good, "metadata": {"name": "bad"},
           "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "", "count": 0}}]}}}
    fields = {c["field"] for c in _refused(create, bad)}
    assert {"spec.devices.requests[0].exactly.deviceClassName", "spec.devices.requests[0].exactly.count"} <= fields
    template = dra.claim_template(8, "t")
    objs.create_namespaced_custom_object("resource.k8s.io", "v1", "t", "resourceclaimtemplates", template)
    got = client.ResourceV1Api(k8s).read_namespaced_resource_claim_template(dra.claim_template_name(8), "t")
    assert got.spec.spec.devices.requests[0].exactly.device_class_name == "nvlink-8.gpu.gpucaas.dev"
