"""The extender over real HTTP, with the JSON kube-scheduler sends (Go field names)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from services.placement.extender import BindingArgs
from services.placement.fleet import FleetIndex
from tests.placement.conftest import serve
from tests.placement.factories import node, pod

NAMES = ["gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-d"]


def test_filter_node_cache_capable(extender_url: str, http: httpx.Client) -> None:
    body = json.dumps({"Pod": pod(2), "Nodes": None, "NodeNames": NAMES})
    resp = http.post(f"{extender_url}/filter", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 200
    result = resp.json()
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    # a, b and d have a free pair; d's lone pair is the best fit (a's board and b's quad stay whole)
    assert result["NodeNames"] == ["gpu-node-d"]
    assert result["Nodes"] is None
    assert result["FailedNodes"]["gpu-node-a"] == "another node fits a 2-GPU partition better (best fit)"
    assert result["FailedNodes"]["gpu-node-b"] == "another node fits a 2-GPU partition better (best fit)"
    assert "no whole 2-GPU partition" in result["FailedNodes"]["gpu-node-c"]  # GPUs 1+2 are no NVLink pair
    assert result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == ""


def test_filter_with_a_node_list_answers_a_node_list(extender_url: str, http: httpx.Client) -> None:
    node_list = {"metadata": {"resourceVersion": "100"}, "items": [node(n) for n in NAMES + ["cpu-node"]]}
    resp = http.post(f"{extender_url}/filter", json={"Pod": pod(8), "Nodes": node_list, "NodeNames": None})
    result = resp.json()
    assert result["NodeNames"] is None
    assert [i["metadata"]["name"] for i in result["Nodes"]["items"]] == ["gpu-node-a"]
    assert result["Nodes"]["items"][0] == node("gpu-node-a")  # passed through untouched
    assert set(result["FailedNodes"]) == {"gpu-node-b", "gpu-node-c", "gpu-node-d"}
    assert "no FabricState" in result["FailedAndUnresolvableNodes"]["cpu-node"]


def test_prioritize_scores_best_fit_highest(extender_url: str, http: httpx.Client) -> None:
    for size, best in ((2, "gpu-node-d"), (4, "gpu-node-b"), (8, "gpu-node-a")):
        kept = http.post(f"{extender_url}/filter", json={"Pod": pod(size), "Nodes": None, "NodeNames": NAMES}).json()
        assert kept["NodeNames"] == [best]  # the filter answers the best fit alone
        resp = http.post(f"{extender_url}/prioritize", json={"Pod": pod(size), "Nodes": None, "NodeNames": NAMES})
        assert resp.status_code == 200
        hosts = resp.json()
        assert [h["Host"] for h in hosts] == NAMES
        assert all(set(h) == {"Host", "Score"} and 0 <= h["Score"] <= 10 for h in hosts)
        assert max(hosts, key=lambda h: h["Score"])["Host"] == best
        assert max(h["Score"] for h in hosts) == 10


def test_bad_requests_name_the_field(extender_url: str, http: httpx.Client) -> None:
    cases = [
        (b"not json", "body"),
        (json.dumps({"Nodes": None, "NodeNames": NAMES}).encode(), "Pod"),
        (json.dumps({"Pod": pod(1)}).encode(), "NodeNames"),
        (json.dumps({"Pod": pod(1), "NodeNames": "gpu-node-a"}).encode(), "NodeNames"),
        (json.dumps({"Pod": pod("two"), "NodeNames": NAMES}).encode(), "Pod.spec.containers[0].resources.limits"),
    ]
    for body, field in cases:
        resp = http.post(f"{extender_url}/filter", content=body)
        assert resp.status_code == 400, body
        detail = resp.json()
        assert detail["code"] == "invalid_request"
        assert detail["detail"].startswith(field), detail
        assert detail["Error"] == detail["detail"]


def test_bind_without_binder_reports_the_error_in_the_result(extender_url: str, http: httpx.Client) -> None:
    args = {"PodName": "job-7f3a", "PodNamespace": "tenant-acme", "PodUID": "9f1c", "Node": "gpu-node-a"}
    resp = http.post(f"{extender_url}/bind", json=args)
    assert resp.status_code == 200
    assert "does not bind" in resp.json()["Error"]
    resp = http.post(f"{extender_url}/bind", json={"PodName": "x"})
    assert resp.status_code == 400 and resp.json()["detail"].startswith("PodNamespace")


def test_bind_calls_the_binder(small_fleet: FleetIndex, http: httpx.Client) -> None:
    bound: list[BindingArgs] = []

    class Recorder:
        def remember(self, pod: dict[str, Any]) -> None:
            raise AssertionError("no filter call was made")

        def bind(self, args: BindingArgs) -> None:
            bound.append(args)

    with serve(small_fleet, binder=Recorder()) as served:
        args = {"PodName": "job-7f3a", "PodNamespace": "tenant-acme", "PodUID": "9f1c", "Node": "gpu-node-b"}
        resp = http.post(f"{served.url}/bind", json=args)
        assert resp.json() == {"Error": ""}
    assert bound == [BindingArgs("job-7f3a", "tenant-acme", "9f1c", "gpu-node-b")]


def test_health_readiness_and_fleet_view(extender_url: str, http: httpx.Client) -> None:
    assert http.get(f"{extender_url}/healthz").json() == {"status": "ok"}
    assert http.get(f"{extender_url}/readyz").json() == {"ready": True, "nodes": 4}
    nodes = {n["node"]: n for n in http.get(f"{extender_url}/v1/nodes").json()["nodes"]}
    assert nodes["gpu-node-c"]["free"] == [1, 2]
    assert nodes["gpu-node-a"]["healthy"] == list(range(1, 9))
