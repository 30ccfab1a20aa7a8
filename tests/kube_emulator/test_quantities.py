"""Canonical quantities for built-in fields (apimachinery resource.Quantity's canonical form)."""

from __future__ import annotations

import pytest
from kubernetes import client

from gpucaas.devtools.kube_emulator.quantities import canonical, same

# (written, what apimachinery's Quantity.String() gives)
CASES = [
    ("1024Gi", "1Ti"), ("1000m", "1"), ("1.5", "1500m"), ("1536Mi", "1536Mi"), ("0.5Gi", "512Mi"),
    ("100m", "100m"), ("1000", "1k"), ("1500k", "1500k"), ("1e3", "1e3"), ("12e6", "12e6"),
    ("0.1m", "100u"), ("1Ki", "1Ki"), ("1023Ki", "1023Ki"), ("512", "512"), ("1.1Ki", "1126400m"),
    ("0", "0"), ("-1024Gi", "-1Ti"), ("1000E", "1e21"), ("0.0000000001", "1n"), ("2048Ki", "2Mi"),
]


@pytest.mark.parametrize(("written", "expected"), CASES)
def test_canonical_form(written: str, expected: str) -> None:
    assert canonical(written) == expected
    assert same(written, expected)


def test_malformed_quantity() -> None:
    with pytest.raises(ValueError):
        canonical("lots")


def test_pvc_1024gi_reads_back_1ti(core: client.CoreV1Api) -> None:
    core.create_namespaced_persistent_volume_claim("default", {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1024Gi"}}}})
    assert core.read_namespaced_persistent_volume_claim("data", "default").spec.resources.requests["storage"] == "1Ti"
    core.create_persistent_volume({"metadata": {"name": "pv"}, "spec": {
        "capacity": {"storage": "2048Gi"}, "accessModes": ["ReadWriteMany"], "nfs": {"server": "nfs", "path": "/x"}}})
    assert core.read_persistent_volume("pv").spec.capacity["storage"] == "2Ti"


def test_pod_resources_quota_and_limit_range(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [{
        "name": "c", "image": "x", "resources": {"requests": {"cpu": "1000m", "memory": "1024Mi"},
                                                 "limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}})
    res = core.read_namespaced_pod("p", "default").spec.containers[0].resources
    assert res.requests == {"cpu": "1", "memory": "1Gi"} and res.limits == {"cpu": "2", "nvidia.com/gpu": "1"}
    core.create_namespaced_resource_quota("default", {"metadata": {"name": "q"},
                                                      "spec": {"hard": {"requests.memory": "4096Mi"}}})
    assert core.read_namespaced_resource_quota("q", "default").spec.hard == {"requests.memory": "4Gi"}
    core.create_namespaced_limit_range("default", {"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "500m", "memory": "2048Mi"}}]}})
    assert core.read_namespaced_limit_range("lr", "default").spec.limits[0].default == {"cpu": "500m",
                                                                                        "memory": "2Gi"}


def test_bad_quantity_is_refused(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_persistent_volume_claim("default", {
            "metadata": {"name": "bad"}, "spec": {"resources": {"requests": {"storage": "a lot"}}}})
    assert err.value.status == 400
    assert ('PersistentVolumeClaim in version \\"v1\\" cannot be handled as a PersistentVolumeClaim: '
            "quantities must match the regular expression") in err.value.body


def test_kubectl_pvc_reads_back_canonical(kubectl, tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "pvc.yaml"
    manifest.write_text("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\n"
                        "spec:\n  accessModes: [ReadWriteMany]\n  resources: {requests: {storage: 1024Gi}}\n")
    kubectl("apply", "-f", str(manifest))
    out = kubectl("get", "pvc", "data", "-n", "default", "-o", "jsonpath={.spec.resources.requests.storage}").stdout
    assert out == "1Ti"
