"""The Kubernetes adapter against the local cluster: create-or-replace keeps what others own."""

from __future__ import annotations

import pytest

from services.tenancy_controller import errors, kube


def quota(pods: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "ns1", "labels": {"mine": "yes", **labels}},
        "spec": {"hard": {"pods": pods}},
    }


def test_ensure_creates_leaves_alone_and_replaces_keeping_foreign_metadata(api):
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    action, live = api.ensure(quota("5"))
    assert action == kube.CREATED
    assert api.ensure(quota("5"))[0] == kube.UNCHANGED

    # another writer adds its metadata; kube-controller-manager's quota controller writes the
    # quota's status meanwhile, so that writer reads again on a conflict, as any client must
    for _attempt in range(10):
        live = api.get("ResourceQuota", "q", "ns1")
        live["metadata"]["labels"]["theirs"] = "keep"
        live["metadata"]["annotations"] = {"note": "keep"}
        try:
            api.replace(live)
            break
        except errors.Conflict:
            continue
    else:
        raise AssertionError("the quota kept changing under the test's own write")
    action, live = api.ensure(quota("7"))
    assert action == kube.REPLACED
    assert live["spec"]["hard"]["pods"] == "7"
    assert live["metadata"]["labels"] == {"mine": "yes", "theirs": "keep"}
    assert live["metadata"]["annotations"] == {"note": "keep"}
    assert api.ensure(quota("7"), expect_absent=True)[0] == kube.UNCHANGED  # create refused -> compared


def test_errors_are_ours_and_named(api):
    assert api.get("ResourceQuota", "nope", "ns-missing") is None
    assert api.delete("ResourceQuota", "nope", "ns-missing") is False
    with pytest.raises(errors.Invalid) as info:
        api.create(
            {
                "apiVersion": "gpucaas.dev/v1alpha1",
                "kind": "Tenancy",
                "metadata": {"name": "x"},
                "spec": {"gpuQuota": -3},
            }
        )
    assert info.value.status == 422 and "gpuQuota" in str(info.value)
    assert isinstance(info.value.__cause__, Exception)
    api.create({"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "x"}})
    with pytest.raises(errors.Conflict):
        api.create({"apiVersion": "gpucaas.dev/v1alpha1", "kind": "Tenancy", "metadata": {"name": "x"}})


def test_unreachable_server_is_unavailable(tmp_path):
    import kubernetes

    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: connection refused
    cfg.retries = False
    client = kube.KubeClient(cfg, timeout=2)
    try:
        with pytest.raises(errors.Unavailable):
            client.get("Namespace", "x")
    finally:
        client.close()
