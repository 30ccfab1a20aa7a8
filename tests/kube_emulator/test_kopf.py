"""Kopf runs a tiny operator against the emulator: create/update/delete with a finalizer, status patched.

The operator runs in a thread with its own event loop (``kopf.operator``), logs in to the
emulator by a login handler, and handles a namespaced custom resource ``Widget``; the test
drives it with the official client only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.waiting import wait_for

GROUP, VERSION, PLURAL = "example.gpucaas.dev", "v1", "widgets"
ARGS = (GROUP, VERSION, "default", PLURAL)

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": PLURAL, "singular": "widget"},
        "versions": [{
            "name": VERSION, "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 1}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "seenSize": {"type": "integer"}}},
                },
            }},
        }],
    },
}

PEERING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterkopfpeerings.kopf.dev"},
    "spec": {
        "group": "kopf.dev",
        "scope": "Cluster",
        "names": {"kind": "ClusterKopfPeering", "plural": "clusterkopfpeerings", "singular": "clusterkopfpeering"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
        }],
    },
}




class Operator:
    """A Kopf operator in a thread, with the handlers' calls recorded."""

    def __init__(self, url: str, token: str, *, standalone: bool, peering_name: str | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.registry = kopf.OperatorRegistry()
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.standalone = standalone
        self.peering_name = peering_name
        reg = self.registry

        @kopf.on.login(registry=reg)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=url, insecure=True, token=token)

        @kopf.on.startup(registry=reg)
        def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
            settings.watching.server_timeout = 30
            settings.persistence.finalizer = "example.gpucaas.dev/widget-operator"

        @kopf.on.create(GROUP, VERSION, PLURAL, registry=reg)
        def created(body: Any, spec: Any, patch: kopf.Patch, **_: Any) -> None:
            self.calls.append(("create", spec.get("size")))
            kopf.info(body, reason="Created", message="widget seen")
            patch.status["phase"] = "Created"
            patch.status["seenSize"] = spec.get("size")

        @kopf.on.update(GROUP, VERSION, PLURAL, registry=reg)
        def updated(spec: Any, patch: kopf.Patch, diff: Any, **_: Any) -> None:
            self.calls.append(("update", spec.get("size")))
            patch.status["phase"] = "Updated"
            patch.status["seenSize"] = spec.get("size")

        @kopf.on.delete(GROUP, VERSION, PLURAL, registry=reg)
        def deleted(name: str, **_: Any) -> None:
            self.calls.append(("delete", name))

        self.thread = threading.Thread(target=self._run, name="kopf-operator", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(kopf.operator(
                registry=self.registry, clusterwide=True, standalone=self.standalone,
                peering_name=self.peering_name, stop_flag=self.stop_flag, ready_flag=self.ready_flag))
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def __enter__(self) -> Operator:
        self.thread.start()
        assert self.ready_flag.wait(60), "the Kopf operator did not become ready"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_flag.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the Kopf operator did not stop"


@pytest.fixture
def widget_api(k8s: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    ext = client.ApiextensionsV1Api(k8s)
    ext.create_custom_resource_definition(WIDGET_CRD)
    yield client.CustomObjectsApi(k8s)


def _get(api: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    try:
        return api.get_namespaced_custom_object(*ARGS, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _exercise(api: client.CustomObjectsApi, op: Operator, core: client.CoreV1Api) -> None:
    api.create_namespaced_custom_object(*ARGS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 1}})
    obj = wait_for(lambda: (o := _get(api, "w1")) and (o.get("status") or {}).get("phase") == "Created" and o,
                   what="status.phase=Created")
    assert obj["status"]["seenSize"] == 1
    assert "example.gpucaas.dev/widget-operator" in obj["metadata"]["finalizers"]

    api.patch_namespaced_custom_object(*ARGS, "w1", {"spec": {"size": 3}})
    obj = wait_for(lambda: (o := _get(api, "w1")) and (o.get("status") or {}).get("phase") == "Updated" and o,
                   what="status.phase=Updated")
    assert obj["status"]["seenSize"] == 3 and obj["metadata"]["generation"] == 2

    api.delete_namespaced_custom_object(*ARGS, "w1")
    wait_for(lambda: _get(api, "w1") is None, what="w1 gone after its finalizer was removed")
    assert op.calls == [("create", 1), ("update", 3), ("delete", "w1")]
    assert op.error is None
    wait_for(lambda: any(e.involved_object.name == "w1" for e in core.list_namespaced_event("default").items),
             what="the k8s events Kopf posts")


def test_kopf_standalone_operator(kube_emulator, k8s: client.ApiClient, widget_api: client.CustomObjectsApi) -> None:
    with Operator(kube_emulator.url, kube_emulator.admin_token, standalone=True) as op:
        _exercise(widget_api, op, client.CoreV1Api(k8s))


def test_kopf_operator_with_peering(kube_emulator, k8s: client.ApiClient,
                                    widget_api: client.CustomObjectsApi) -> None:
    client.ApiextensionsV1Api(k8s).create_custom_resource_definition(PEERING_CRD)
    custom = client.CustomObjectsApi(k8s)
    custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", {
        "apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": "widgets"}})
    with Operator(kube_emulator.url, kube_emulator.admin_token, standalone=False, peering_name="widgets") as op:
        peering = wait_for(
            lambda: (custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", "widgets")
                     .get("status") or None),
            what="the operator's peering record")
        assert len(peering) == 1, "one operator announced itself in the peering object"
        _exercise(widget_api, op, client.CoreV1Api(k8s))
