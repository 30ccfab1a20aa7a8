"""Namespaces pass through Terminating while their objects go; no new content meanwhile."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gpucaas.devtools.waiting import wait_for


def _gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespace(name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_terminating_namespace_reports_and_refuses_content(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    assert core.read_namespace("team").spec.finalizers == ["kubernetes"]
    core.create_namespaced_config_map("team", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    core.create_namespaced_config_map("team", {"metadata": {"name": "free"}})
    core.delete_namespace("team")

    ns = wait_for(lambda: (n := core.read_namespace("team")).status.conditions and n, what="deletion conditions")
    assert ns.status.phase == "Terminating" and ns.metadata.deletion_timestamp is not None
    assert ns.spec.finalizers == ["kubernetes"]
    conditions = {c.type: c for c in ns.status.conditions}
    assert conditions["NamespaceDeletionContentFailure"].status == "False"
    assert conditions["NamespaceContentRemaining"].status == "True"
    assert conditions["NamespaceContentRemaining"].message == \
        "Some resources are remaining: configmaps. has 1 resource instances"
    assert conditions["NamespaceFinalizersRemaining"].message == \
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    assert [c.metadata.name for c in core.list_namespaced_config_map("team").items] == ["held"]

    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map("team", {"metadata": {"name": "late"}})
    assert err.value.status == 403
    body = json.loads(err.value.body)
    assert body["message"] == ('configmaps "late" is forbidden: unable to create new content in namespace team '
                               "because it is being terminated")
    assert body["details"]["causes"] == [{"reason": "NamespaceTerminating", "message": "namespace team is being "
                                          "terminated", "field": "metadata.namespace"}]

    core.patch_namespaced_config_map("held", "team", {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(core, "team"), what="namespace team removed")


def test_kubectl_create_in_terminating_namespace(kubectl, core: client.CoreV1Api) -> None:  # type: ignore[no-untyped-def]
    core.create_namespace({"metadata": {"name": "going"}})
    core.create_namespaced_config_map("going", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    kubectl("delete", "namespace", "going", "--wait=false")
    assert kubectl("get", "namespace", "going").stdout.splitlines()[1].split()[:2] == ["going", "Terminating"]
    proc = kubectl("create", "configmap", "late", "-n", "going", check=False)
    assert proc.returncode != 0
    assert "unable to create new content in namespace going because it is being terminated" in proc.stderr
