"""The admins' CLI against the running sandbox: the installed `caasctl`, configured only by the
caasctl.yaml the sandbox writes (API URL, admin token, CA, each node's fabric socket)."""

from __future__ import annotations

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
