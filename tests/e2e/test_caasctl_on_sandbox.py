"""The admins' CLI against the running sandbox: the installed `caasctl`, configured only by the
caasctl.yaml the sandbox writes (API URL, admin token, CA, each node's fabric socket)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from devtools.sandbox import runner
from tests.fixtures.sandbox import as_json, caasctl

from .conftest import UNTIL_CANCELLED, activations, allocated_devices, holder_of, wait_for, wait_status

IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"


def test_inventory_through_caasctl(sandbox: runner.Sandbox) -> None:
    nodes = as_json(caasctl(sandbox, "nodes", "-o", "json"))
    assert {n["name"]: (n["ready"], n["gpu_capacity"]) for n in nodes} == {
        "gpu-node-a": (True, 8),
        "gpu-node-b": (True, 8),
    }
    parts = as_json(caasctl(sandbox, "partitions", "list", "--node", "gpu-node-a", "-o", "json"))
    assert sorted(p["id"] for p in parts) == list(range(15))
    gpus = as_json(caasctl(sandbox, "gpus", "--node", "gpu-node-b", "-o", "json"))
    assert len(gpus) == 8 and {g["state"] for g in gpus} <= {"Free", "Leased", "Releasing", "Checking"}
    assert "demo" in {t["name"] for t in as_json(caasctl(sandbox, "tenancies", "list", "-o", "json"))}


def test_partition_refused_while_a_container_holds_it(sandbox: runner.Sandbox, tenant_factory, k8s) -> None:
    tenant = tenant_factory("cli-holder")
    status, body = tenant.call("POST", "/v1/containers", {"image": IMAGE, "gpus": 2, "command": UNTIL_CANCELLED})
    assert status == 202, body
    running = wait_status(tenant, body["id"], "Running")
    node = running["node_name"]
    wait_for(lambda: allocated_devices(sandbox, "tenant-cli-holder", running["pod_name"]), what="devices")
    holder = holder_of(sandbox, "tenant-cli-holder", running["pod_name"])
    act = wait_for(
        lambda: next((a for a in activations(sandbox)[node] if a["holder"] == holder), None),
        what="the container's partition",
    )
    held = act["partition_ids"][0]
    whole_board = "0"  # partition 0 overlaps every partition on the board
    refused = caasctl(sandbox, "partitions", "activate", whole_board, "--node", node)
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1 and holder in refused.stderr
    parts = as_json(caasctl(sandbox, "partitions", "list", "--node", node, "-o", "json"))
    assert next(p for p in parts if p["id"] == held)["active"] is True
    assert as_json(caasctl(sandbox, "containers", "cancel", body["id"], "-o", "json"))["status"] == "Cancelled"


@pytest.mark.any_allocation
def test_warm_images_are_pulled_on_every_gpu_node_and_let_go(sandbox: runner.Sandbox, k8s: Any) -> None:
    """An admin's warm image through the API and the controller's DaemonSet to the real nodes'
    kubelets, which pull it as an image volume and report it; a second one changes the
    DaemonSet; removing both removes it."""
    apps = client.AppsV1Api(k8s)
    lazy = "docker.io/library/busybox:1.36-esgz"  # an eStargz image, through the nodes' lazy snapshotter

    def held_everywhere(*images: str) -> bool:
        nodes = as_json(caasctl(sandbox, "nodes", "-o", "json"))
        return all(
            {w["image"] for w in n["warm_images"] if w["held"]} >= set(images) for n in nodes if n["gpu_capacity"]
        )

    def holders() -> list[Any]:
        return k8s_pods(k8s, "app.kubernetes.io/component=warm-images")

    first = as_json(caasctl(sandbox, "warm-images", "add", IMAGE, "-o", "json"))
    assert first["source"] == "api"
    try:
        wait_for(lambda: held_everywhere(IMAGE), 180, interval=1, what=f"{IMAGE} held on every GPU node")
        wait_for(
            lambda: {p.spec.node_name for p in holders()} == {"gpu-node-a", "gpu-node-b"},
            60,
            interval=0.5,
            what="a warm-image pod Running on each GPU node",
        )
        as_json(caasctl(sandbox, "warm-images", "add", lazy, "-o", "json"))
        wait_for(lambda: held_everywhere(IMAGE, lazy), 180, interval=1, what="both images held on every GPU node")
        listed = as_json(caasctl(sandbox, "warm-images", "list", "-o", "json"))
        assert {(w["image"], w["nodes_holding"], w["nodes_total"]) for w in listed} == {(IMAGE, 2, 2), (lazy, 2, 2)}
    finally:
        for image in (IMAGE, lazy):
            caasctl(sandbox, "warm-images", "remove", image)
    wait_for(lambda: not _daemonset_exists(apps), 60, interval=0.5, what="the warm-image DaemonSet gone")
    assert as_json(caasctl(sandbox, "warm-images", "list", "-o", "json")) == []


def k8s_pods(k8s: Any, selector: str) -> list[Any]:
    return [
        p
        for p in client.CoreV1Api(k8s).list_namespaced_pod("gpucaas-system", label_selector=selector).items
        if p.status.phase == "Running"
    ]


def _daemonset_exists(apps: client.AppsV1Api) -> bool:
    try:
        apps.read_namespaced_daemon_set("gpucaas-warm-images", "gpucaas-system")
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
