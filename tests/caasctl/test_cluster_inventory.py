"""caasctl nodes, gpus (+ quarantine/release), leases and partitions list through the API.

The cluster is what the other services would publish: a Node with GPU capacity, GPULeases
(``core.lease_store``, moved by the lease state machine ``core.lease_states``),
and the FabricState that the fabric service's own publisher writes from a fabric service
running over the Fabric Manager simulator (one partition held by a container, one GPU with
a failed NVLink).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from core import lease_states
from core.fabric_client import holder_for_gpus
from core.lease_store import LeaseStore, build_gpu_lease, lease_name
from services.fabric.fabric_manager.simulator import default_gpu_map
from services.fabric.publisher import FabricStatePublisher, build_fabric_state_status

from .conftest import Caasctl, Fabric

NODE = "gpu-node-a"
OTHER = "gpu-node-b"
GPUS = default_gpu_map()  # physical id -> PCI address of the reference board
HELD = (1, 2, 3, 4)  # partition 1 of the HGX H100 table, held by a running container
HOLDER = holder_for_gpus(GPUS[p] for p in HELD)
BROKEN = 8  # the GPU with a failed NVLink


def get_lease(kube: Any, node: str, pci: str) -> dict[str, Any]:
    lease = LeaseStore(kube).get(lease_name(node, pci))
    assert lease is not None
    return lease


@pytest.fixture(scope="module")
def cluster(kube: Any, fabric_service: Fabric) -> dict[str, Any]:
    core = client.CoreV1Api(kube)
    for name, gpus in ((NODE, 8), (OTHER, 0)):
        core.create_node({"metadata": {"name": name, "labels": {"gpucaas.dev/gpu-node": "true"}}})
        core.patch_node_status(
            name,
            {
                "status": {
                    "capacity": {"nvidia.com/gpu": str(gpus)},
                    "allocatable": {"nvidia.com/gpu": str(gpus)},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True" if name == NODE else "False",
                            "reason": "KubeletReady",
                            "message": "ok",
                        }
                    ],
                }
            },
        )
    store = LeaseStore(kube)
    for physical_id, pci in GPUS.items():
        store.ensure(build_gpu_lease(NODE, pci, "0x2330", physical_id, "H100-SXM5-80GB"))
    holder = lease_states.Holder("gpucaas-c1", "tenant-acme", "acme")
    for physical_id in HELD:
        store.transition(lease_name(NODE, GPUS[physical_id]), lambda st: lease_states.allocated(st, holder))

    svc = fabric_service.service
    svc.activate(HOLDER, [GPUS[p] for p in HELD], pod="tenant-acme/gpucaas-c1")
    fabric_service.fabric.inject_gpu_nvlink_failure(BROKEN)

    def collect() -> dict[str, Any]:
        return build_fabric_state_status(
            partitions=svc.list_partitions(),
            gpus=svc.topology()["gpus"],
            service_vm={"state": "running", "restarts": 0},
            fabric_manager={"reachable": True, "backend": svc.backend},
        )

    FabricStatePublisher(kube, NODE, collect).publish_once()
    return {"partitions": svc.list_partitions()}


def test_nodes(caasctl: Caasctl, cluster: dict[str, Any]) -> None:
    rows = caasctl("nodes", "-o", "json").json()
    by_name = {r["name"]: r for r in rows}
    assert set(by_name) == {NODE, OTHER}
    a = by_name[NODE]
    assert (a["ready"], a["gpu_capacity"], a["gpu_allocatable"]) == (True, 8, 8)
    assert a["fabric"]["service_vm"] == "running" and a["fabric"]["fabric_manager_reachable"] is True
    assert a["fabric"]["active_partitions"] == [1]
    assert by_name[OTHER]["ready"] is False and by_name[OTHER]["fabric"] is None

    table = caasctl("nodes")
    assert table.exit_code == 0, table.stderr
    for header in ("NODE", "READY", "GPUs", "SERVICE VM", "FABRIC MANAGER", "ACTIVE PARTITIONS"):
        assert header in table.stdout
    line = next(ln for ln in table.stdout.splitlines() if NODE in ln)
    assert "8/8" in line and "running" in line and "yes" in line


def test_gpus_show_state_lease_tenancy_and_health(caasctl: Caasctl, cluster: dict[str, Any]) -> None:
    r = caasctl("gpus", "--node", NODE, "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = {g["physical_id"]: g for g in r.json()}
    assert set(rows) == set(GPUS)
    for p in HELD:
        assert (rows[p]["state"], rows[p]["tenancy"], rows[p]["pod"]) == ("Leased", "acme", "gpucaas-c1")
    assert rows[5]["state"] == "Free" and rows[5]["tenancy"] is None and rows[5]["healthy"] is True
    assert rows[BROKEN]["healthy"] is False  # from the fabric service's FabricState
    assert all(g["lease"] == lease_name(NODE, g["pci_address"]) for g in rows.values())

    assert caasctl("gpus", "--node", OTHER, "-o", "json").json() == []
    everything = caasctl("gpus", "-o", "yaml").yaml()  # no sub-command, no --node: every GPU
    assert len(everything) == len(GPUS)

    table = caasctl("gpus")
    assert table.exit_code == 0, table.stderr
    for header in ("NODE", "PCI", "PHYS", "STATE", "TENANCY", "POD", "HEALTHY", "REASON"):
        assert header in table.stdout
    held_line = next(ln for ln in table.stdout.splitlines() if GPUS[1] in ln)
    assert "Leased" in held_line and "acme" in held_line and "gpucaas-c1" in held_line
    broken_line = next(ln for ln in table.stdout.splitlines() if GPUS[BROKEN] in ln)
    assert " no " in broken_line
    # every PCI address verbatim: rich would render "0000:ab:00.0" with an emoji for ":ab:"
    assert all(pci in table.stdout for pci in GPUS.values())


def test_quarantine_and_release(caasctl: Caasctl, cluster: dict[str, Any], kube: Any) -> None:
    pci = GPUS[6]
    r = caasctl("gpus", "quarantine", NODE, pci, "--reason", "fan noise", "-o", "json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["state"] == "Quarantined" and r.json()["message"] == "fan noise"
    assert get_lease(kube, NODE, pci)["status"]["state"] == "Quarantined"
    row = next(g for g in caasctl("gpus", "-n", NODE, "-o", "json").json() if g["pci_address"] == pci)
    assert row["state"] == "Quarantined"

    r = caasctl("gpus", "release", NODE, pci, "-o", "yaml")
    assert r.exit_code == 0, r.stderr
    assert r.yaml()["state"] == "Releasing"  # checked again before anyone gets it
    assert get_lease(kube, NODE, pci)["status"]["reason"] == "ReleasedByAdmin"

    # a GPU a running container holds cannot be quarantined: the API says who holds it
    busy = caasctl("gpus", "quarantine", NODE, GPUS[1])
    assert busy.exit_code == 1 and busy.stdout == ""
    assert busy.stderr.startswith("error: 409: ") and "tenant-acme/gpucaas-c1" in busy.stderr
    assert len(busy.stderr.strip().splitlines()) == 1
    missing = caasctl("gpus", "release", NODE, "0000:99:00.0")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: 404: ") and "0000:99:00.0" in missing.stderr
    bad = caasctl("gpus", "quarantine", NODE, "not-a-pci")
    assert bad.exit_code == 1 and bad.stderr.startswith("error: 422: ") and "pci_address" in bad.stderr


def test_leases(caasctl: Caasctl, cluster: dict[str, Any]) -> None:
    rows = caasctl("leases", "--node", NODE, "-o", "json").json()
    assert [r["name"] for r in rows] == sorted(lease_name(NODE, pci) for pci in GPUS.values())
    held = next(r for r in rows if r["pci_address"] == GPUS[2])
    assert held["state"] == "Leased" and held["holder"]["pod"] == "gpucaas-c1" and held["holder"]["tenancy"] == "acme"
    assert caasctl("leases", "--node", OTHER, "-o", "json").json() == []
    assert caasctl("leases", "-o", "yaml").yaml() == caasctl("leases", "-o", "json").json()

    table = caasctl("leases")
    for header in ("LEASE", "STATE", "TENANCY", "POD", "LAST CHECK", "REASON"):
        assert header in table.stdout
    assert lease_name(NODE, GPUS[2]) in table.stdout


def test_partitions_list_from_the_fabric_state(caasctl: Caasctl, cluster: dict[str, Any]) -> None:
    r = caasctl("partitions", "list", "--node", NODE, "-o", "json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()
    # what the fabric service reported, as the API serves it
    assert [(p["id"], p["gpus"], p["nvlinks"], p["active"], p["holder"]) for p in rows] == [
        (p["id"], sorted(g["physical_id"] for g in p["gpus"]), p["nvlinks"], p["active"], p["holder"])
        for p in cluster["partitions"]
    ]
    assert all(p["node"] == NODE for p in rows)
    one = next(p for p in rows if p["id"] == 1)
    assert one["active"] is True and one["holder"] == HOLDER and one["gpus"] == [1, 2, 3, 4]
    assert caasctl("partitions", "list", "--node", OTHER, "-o", "json").json() == []
    assert caasctl("partitions", "list", "-o", "yaml").yaml() == caasctl("partitions", "list", "-o", "json").json()

    table = caasctl("partitions", "list")
    assert table.exit_code == 0, table.stderr
    for header in ("NODE", "PARTITION ID", "STATUS", "GPUs", "NVLINKS", "GPU PHYSICAL IDs", "HOLDER"):
        assert header in table.stdout
    active = [ln for ln in table.stdout.splitlines() if "Active" in ln and "Inactive" not in ln]
    assert len(active) == 1 and "1,2,3,4" in active[0] and HOLDER in active[0]


def test_warm_images_added_listed_shown_per_node_and_removed(
    caasctl: Caasctl, cluster: dict[str, Any], kube: Any
) -> None:
    image = "nvcr.io/nvidia/pytorch:25.01-py3"
    added = caasctl("warm-images", "add", image, "-o", "json")
    assert added.exit_code == 0, added.stderr
    row = added.json()
    try:
        assert (row["image"], row["source"], row["nodes_holding"], row["nodes_total"]) == (image, "api", 0, 1)
        assert row["missing_on"] == [NODE]  # the GPU node (it has a FabricState); the other is none
        line = next(ln for ln in caasctl("nodes").stdout.splitlines() if NODE in ln)
        assert "0/1 held" in line

        # the node's kubelet reports the image pulled
        client.CoreV1Api(kube).patch_node_status(
            NODE, {"status": {"images": [{"names": [image], "sizeBytes": 15 * 10**9}]}}
        )
        listed = caasctl("warm-images", "list")
        assert listed.exit_code == 0, listed.stderr
        line = next(ln for ln in listed.stdout.splitlines() if "pytorch" in ln)
        assert "1/1" in line and "api" in line
        assert "1/1 held" in next(ln for ln in caasctl("nodes").stdout.splitlines() if NODE in ln)
        # adding it again, spelt another way, is no new image
        again = caasctl("warm-images", "add", "nvcr.io/nvidia/pytorch:25.01-py3", "-o", "json")
        assert again.exit_code == 0 and again.json()["id"] == row["id"]
        bad = caasctl("warm-images", "add", "Not An Image")
        assert bad.exit_code == 1 and "image" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    finally:
        removed = caasctl("warm-images", "remove", image, "-o", "json")
    assert removed.exit_code == 0, removed.stderr
    assert removed.json() == {"removed": image, "id": row["id"]}
    assert caasctl("warm-images", "list", "-o", "json").json() == []
    gone = caasctl("warm-images", "remove", image)
    assert gone.exit_code == 1 and "404" in gone.stderr
