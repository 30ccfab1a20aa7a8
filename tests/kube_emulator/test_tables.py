"""The Table format kubectl get asks for: CRD printer columns, built-in columns, includeObject."""

from __future__ import annotations

from kubernetes import client

from tests.kube_emulator.conftest import api_call, lease_body, pod_body

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


def _table(k8s: client.ApiClient, path: str, **query: str) -> dict:
    status, _, body = api_call(k8s, "GET", path, headers={"Accept": TABLE}, query=query)
    assert status == 200, body
    assert body["kind"] == "Table" and body["apiVersion"] == "meta.k8s.io/v1"
    return body


def test_crd_printer_columns_with_priority(k8s: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", lease_body())
    table = _table(k8s, "/apis/gpucaas.dev/v1alpha1/gpuleases")
    columns = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns[:4] == [("Name", "string", 0), ("Node", "string", 0), ("PCI", "string", 0), ("State", "string", 0)]
    assert ("Reason", "string", 1) in columns  # shown by kubectl only with -o wide
    row = table["rows"][0]
    assert row["cells"][:3] == ["node1-0000-18-00-0", "node1", "0000:18:00.0"]
    assert row["object"]["kind"] == "PartialObjectMetadata"  # includeObject defaults to Metadata
    assert row["object"]["metadata"]["name"] == "node1-0000-18-00-0"


def test_include_object_and_single_get(k8s: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies",
                                        {"metadata": {"name": "acme"}, "spec": {"gpuQuota": 4}})
    table = _table(k8s, "/apis/gpucaas.dev/v1alpha1/tenancies/acme", includeObject="Object")
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Phase", "Namespace", "GPU-Quota", "Internet", "Age"]
    cells = table["rows"][0]["cells"]
    assert cells[0] == "acme" and cells[3] == 4 and cells[4] is False
    assert table["rows"][0]["object"]["spec"]["gpuQuota"] == 4
    table = _table(k8s, "/apis/gpucaas.dev/v1alpha1/tenancies", includeObject="None")
    assert "object" not in table["rows"][0]
    status, _, body = api_call(k8s, "GET", "/apis/gpucaas.dev/v1alpha1/tenancies", headers={"Accept": TABLE},
                               query={"includeObject": "Everything"})
    assert status == 400 and "includeObject" in body["message"]


def test_builtin_pod_and_namespace_columns(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod_body("web"))
    table = _table(k8s, "/api/v1/namespaces/default/pods")
    names = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["web", "0/1", "Pending", "0"]
    table = _table(k8s, "/api/v1/namespaces")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert ["default", "Active"] == table["rows"][[r["cells"][0] for r in table["rows"]].index("default")]["cells"][:2]


def test_plain_json_is_still_the_default(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    status, _, body = api_call(k8s, "GET", "/api/v1/namespaces", headers={"Accept": "application/json"})
    assert status == 200 and body["kind"] == "NamespaceList"


def test_kubectl_get_wide_shows_priority_columns(kubectl, custom: client.CustomObjectsApi) -> None:  # type: ignore[no-untyped-def]
    custom.create_cluster_custom_object("gpucaas.dev", "v1alpha1", "gpuleases", lease_body())
    plain = kubectl("get", "gpuleases").stdout.splitlines()
    assert plain[0].split() == ["NAME", "NODE", "PCI", "STATE", "TENANCY", "AGE"]
    wide = kubectl("get", "gpuleases", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "NODE", "PCI", "STATE", "TENANCY", "REASON", "AGE"]
    assert wide[1].split()[:3] == ["node1-0000-18-00-0", "node1", "0000:18:00.0"]


def test_kubectl_get_pods_columns(kubectl, core: client.CoreV1Api) -> None:  # type: ignore[no-untyped-def]
    core.create_namespaced_pod("default", pod_body("web"))
    lines = kubectl("get", "pods", "-n", "default").stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert lines[1].split()[:4] == ["web", "0/1", "Pending", "0"]


def test_watch_events_are_tables_when_asked(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    import json

    core.create_namespaced_pod("default", pod_body("web"))
    status, _, raw = api_call(k8s, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": TABLE},
                              query={"watch": "true", "resourceVersion": "0", "timeoutSeconds": "1"})
    assert status == 200
    events = [json.loads(line) for line in (raw if isinstance(raw, bytes) else json.dumps(raw).encode()).splitlines()]
    assert events[0]["type"] == "ADDED"
    assert events[0]["object"]["kind"] == "Table"
    assert events[0]["object"]["rows"][0]["cells"][:3] == ["web", "0/1", "Pending"]
