"""Label selectors (=, ==, !=, in, notin, exists, !exists) and field selectors."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kube_emulator.conftest import pod_body


@pytest.fixture
def pods(core: client.CoreV1Api) -> client.CoreV1Api:
    core.create_namespaced_pod("default", pod_body("a", labels={"tier": "gpu", "team": "x"}, nodeName="n1"))
    core.create_namespaced_pod("default", pod_body("b", labels={"tier": "cpu", "team": "y"}, nodeName="n2"))
    core.create_namespaced_pod("default", pod_body("c", labels={"tier": "gpu"}))
    core.create_namespaced_pod("kube-system", pod_body("d", labels={"tier": "gpu"}, nodeName="n1"))
    core.patch_namespaced_pod_status("b", "default", {"status": {"phase": "Running"}})
    return core


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", {"a", "c"}),
        ("tier==gpu", {"a", "c"}),
        ("tier!=gpu", {"b"}),
        ("tier in (gpu, cpu)", {"a", "b", "c"}),
        ("tier notin (gpu)", {"b"}),
        ("team", {"a", "b"}),
        ("!team", {"c"}),
        ("tier=gpu,team", {"a"}),
        ("team in (x,y),tier!=cpu", {"a"}),
        ("missing=1", set()),
    ],
)
def test_label_selectors(pods: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    got = {p.metadata.name for p in pods.list_namespaced_pod("default", label_selector=selector).items}
    assert got == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("metadata.name=a", {"a"}),
        ("metadata.namespace=kube-system", {"d"}),
        ("spec.nodeName=n1", {"a", "d"}),
        ("spec.nodeName!=n1", {"b", "c"}),
        ("spec.nodeName=", {"c"}),
        ("status.phase=Running", {"b"}),
        ("status.phase=Pending,spec.nodeName=n1", {"a", "d"}),
    ],
)
def test_field_selectors(pods: client.CoreV1Api, selector: str, expected: set[str]) -> None:
    got = {p.metadata.name for p in pods.list_pod_for_all_namespaces(field_selector=selector).items}
    assert got == expected


def test_bad_label_selector_is_400(pods: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        pods.list_namespaced_pod("default", label_selector="a in b")
    assert err.value.status == 400


def test_custom_object_label_selector(custom: client.CustomObjectsApi) -> None:
    args = ("gpucaas.dev", "v1alpha1", "tenancies")
    for name, tier in (("t1", "gold"), ("t2", "silver")):
        custom.create_cluster_custom_object(*args, {
            "apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy",
            "metadata": {"name": name, "labels": {"tier": tier}}, "spec": {"gpuQuota": 8}})
    got = custom.list_cluster_custom_object(*args, label_selector="tier=gold")
    assert [o["metadata"]["name"] for o in got["items"]] == ["t1"]
