"""Deletion: finalizers, namespace cascade, ownerReferences garbage collection, CRD removal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.waiting import wait_for
from tests.kube_emulator.conftest import lease_body, pod_body

LEASES = ("gpucaas.dev", "v1alpha1", "gpuleases")




def _gone(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except ApiException as exc:
        return exc.status == 404
    return False


def test_finalizer_keeps_object_until_removed(core: client.CoreV1Api) -> None:
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "f", "finalizers": ["x.dev/keep"]}})
    core.delete_namespaced_config_map("f", "default")
    held = core.read_namespaced_config_map("f", "default")
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["x.dev/keep"]
    assert held.metadata.uid == cm.metadata.uid
    # a second delete changes nothing
    core.delete_namespaced_config_map("f", "default")
    assert core.read_namespaced_config_map("f", "default").metadata.resource_version == held.metadata.resource_version
    core.patch_namespaced_config_map("f", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x.dev/keep"]}})
    assert _gone(lambda: core.read_namespaced_config_map("f", "default"))


def test_no_new_finalizers_while_deleting(custom: client.CustomObjectsApi) -> None:
    body = lease_body()
    body["metadata"]["finalizers"] = ["a.dev/one"]
    custom.create_cluster_custom_object(*LEASES, body)
    name = body["metadata"]["name"]
    custom.delete_cluster_custom_object(*LEASES, name)
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(*LEASES, name, {"metadata": {"finalizers": ["a.dev/one", "b.dev/two"]}})
    assert err.value.status == 422
    custom.patch_cluster_custom_object(*LEASES, name, {"metadata": {"finalizers": None}})
    assert _gone(lambda: custom.get_cluster_custom_object(*LEASES, name))


def test_namespace_deletion_cascades(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "tenant-a", "labels": {"gpucaas.dev/tenancy": "a"}}})
    core.create_namespaced_pod("tenant-a", pod_body("p"))
    core.create_namespaced_config_map("tenant-a", {"metadata": {"name": "held", "finalizers": ["x.dev/hold"]}})
    core.create_namespaced_resource_quota("tenant-a", {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "1"}}})
    core.delete_namespace("tenant-a")
    ns = core.read_namespace("tenant-a")
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    wait_for(lambda: not core.list_namespaced_pod("tenant-a").items, what="pods deleted")
    assert not core.list_namespaced_resource_quota("tenant-a").items
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("tenant-a", {"metadata": {"name": "late"}})
    assert err.value.status == 403
    # the finalizer on the config map holds the namespace
    held = core.read_namespaced_config_map("held", "tenant-a")
    assert held.metadata.deletion_timestamp is not None
    assert core.read_namespace("tenant-a").status.phase == "Terminating"
    core.patch_namespaced_config_map("held", "tenant-a", {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(lambda: core.read_namespace("tenant-a")), what="namespace removed")


def test_namespace_deletion_removes_custom_resources(core: client.CoreV1Api, crds: client.ApiextensionsV1Api,
                                                     custom: client.CustomObjectsApi) -> None:
    crds.create_custom_resource_definition({
        "metadata": {"name": "things.example.dev"},
        "spec": {"group": "example.dev", "scope": "Namespaced",
                 "names": {"kind": "Thing", "plural": "things"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]}})
    core.create_namespace({"metadata": {"name": "ns1"}})
    custom.create_namespaced_custom_object("example.dev", "v1", "ns1", "things",
                                           {"apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {"name": "t"}})
    core.delete_namespace("ns1")
    wait_for(lambda: _gone(lambda: core.read_namespace("ns1")), what="namespace removed")
    assert _gone(lambda: custom.get_namespaced_custom_object("example.dev", "v1", "ns1", "things", "t"))


def test_owner_references_gc(core: client.CoreV1Api) -> None:
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_pod("default", {**pod_body("dep"), "metadata": {"name": "dep", "ownerReferences": [ref]}})
    core.create_namespaced_pod("default", pod_body("free"))
    core.delete_namespaced_config_map("owner", "default")
    wait_for(lambda: _gone(lambda: core.read_namespaced_pod("dep", "default")), what="dependent collected")
    assert core.read_namespaced_pod("free", "default")


def test_cluster_scoped_owner_of_namespaced_dependents(core: client.CoreV1Api,
                                                       custom: client.CustomObjectsApi) -> None:
    tenancy = custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", {
        "apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "acme"}, "spec": {}})
    ref = {"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "name": "acme",
           "uid": tenancy["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    core.create_namespace({"metadata": {"name": "tenant-acme", "ownerReferences": [ref]}})
    core.create_namespaced_config_map("tenant-acme", {"metadata": {"name": "c", "ownerReferences": [ref]}})
    custom.delete_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "acme")
    wait_for(lambda: _gone(lambda: core.read_namespace("tenant-acme")), what="owned namespace removed")


def test_gc_keeps_dependent_with_a_live_owner(core: client.CoreV1Api) -> None:
    a = core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    b = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": m.metadata.name, "uid": m.metadata.uid} for m in (a, b)]
    core.create_namespaced_secret("default", {"metadata": {"name": "s", "ownerReferences": refs}})
    core.delete_namespaced_config_map("a", "default")
    wait_for(lambda: len(core.read_namespaced_secret("s", "default").metadata.owner_references) == 1,
             what="dangling reference dropped")
    assert core.read_namespaced_secret("s", "default").metadata.owner_references[0].name == "b"


def test_orphan_propagation_keeps_dependents(core: client.CoreV1Api) -> None:
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_secret("default", {"metadata": {"name": "s", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    # Orphaning strips the reference from the dependent; the dependent itself stays.
    wait_for(lambda: not core.read_namespaced_secret("s", "default").metadata.owner_references,
             what="the owner reference removed from the orphaned secret")
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items if c.metadata.name == "owner"] == []
    assert core.read_namespaced_secret("s", "default").metadata.name == "s"


def test_dependent_with_missing_owner_is_collected(core: client.CoreV1Api) -> None:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "never", "uid": "00000000-0000-0000-0000-000000000000"}
    core.create_namespaced_secret("default", {"metadata": {"name": "s", "ownerReferences": [ref]}})
    wait_for(lambda: _gone(lambda: core.read_namespaced_secret("s", "default")), what="orphan collected")


def test_crd_deletion_removes_its_objects_and_discovery(crds: client.ApiextensionsV1Api,
                                                         custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(*LEASES, lease_body("l1"))
    crds.delete_custom_resource_definition("gpuleases.gpucaas.dev")
    wait_for(lambda: _gone(lambda: crds.read_custom_resource_definition("gpuleases.gpucaas.dev")),
             what="CRD removed")
    with pytest.raises(ApiException) as err:
        custom.list_cluster_custom_object(*LEASES)
    assert err.value.status == 404


def test_foreground_deletion_waits_for_dependents(core: client.CoreV1Api) -> None:
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    core.create_namespaced_secret("default", {"metadata": {"name": "s", "ownerReferences": [ref],
                                                           "finalizers": ["x.dev/hold"]}})
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    held = core.read_namespaced_config_map("owner", "default")
    assert held.metadata.deletion_timestamp is not None and "foregroundDeletion" in held.metadata.finalizers
    assert core.read_namespaced_secret("s", "default").metadata.deletion_timestamp is not None
    core.patch_namespaced_secret("s", "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(lambda: core.read_namespaced_config_map("owner", "default")), what="owner removed")
