"""FabricState publishing: the pure status builder, then through the kubernetes client to the
local cluster's kube-apiserver."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes import client as kclient

from core.crds import FABRICSTATE_PLURAL, GROUP, VERSION
from devtools.waiting import wait_for
from services.fabric.fabric_manager.simulator import SimulatedFabric
from services.fabric.partitions import PartitionService
from services.fabric.publisher import FabricStatePublisher, build_fabric_state_status
from tests.fabric.factories import holder, pcis

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_status_builder() -> None:
    partitions = [
        {
            "id": 3,
            "gpus": [{"physical_id": 3, "pci_bus_id": "b"}, {"physical_id": 1, "pci_bus_id": "a"}],
            "nvlinks": 36,
            "active": True,
            "supported": True,
            "holder": "h",
        },
        {
            "id": 9,
            "gpus": [{"physical_id": 3, "pci_bus_id": "b"}],
            "nvlinks": 0,
            "active": False,
            "supported": False,
            "holder": None,
        },
    ]
    gpus = [
        {"physical_id": 1, "pci_bus_id": "a", "healthy": True, "reason": None},
        {"physical_id": 3, "pci_bus_id": "b", "healthy": False, "reason": "NVLink failure on ports [2]"},
    ]
    status = build_fabric_state_status(
        partitions=partitions,
        gpus=gpus,
        failed_switches=[{"pci_bus_id": "0000:05:00.0"}],
        service_vm={"state": "running", "domain": "d", "restarts": 2, "message": ""},
        fabric_manager={"reachable": True, "backend": "simulator", "message": ""},
        now=NOW,
    )
    assert status == {
        "updatedAt": "2026-01-02T03:04:05Z",
        "activePartitionIds": "3",
        "serviceVM": {"state": "running", "domain": "d", "restarts": 2},
        "fabricManager": {"reachable": True, "backend": "simulator"},
        "partitions": [
            {"id": 3, "gpus": [1, 3], "nvlinks": 36, "active": True, "supported": True, "holder": "h"},
            {"id": 9, "gpus": [3], "nvlinks": 0, "active": False, "supported": False},
        ],
        "gpus": [
            {"physicalId": 1, "pciBusId": "a", "healthy": True},
            {"physicalId": 3, "pciBusId": "b", "healthy": False, "reason": "NVLink failure on ports [2]"},
        ],
        "failedDevices": [
            {"physicalId": 3, "pciBusId": "b", "kind": "gpu", "reason": "NVLink failure on ports [2]"},
            {"pciBusId": "0000:05:00.0", "kind": "nvswitch", "reason": "NVLink failure"},
        ],
    }


def test_status_when_fm_unreachable() -> None:
    status = build_fabric_state_status(
        partitions=None,
        gpus=None,
        service_vm={"state": "crashed"},
        fabric_manager={"reachable": False, "backend": "nvfm", "message": "down"},
        now=NOW,
    )
    assert "partitions" not in status and "gpus" not in status
    assert status["fabricManager"] == {"reachable": False, "backend": "nvfm", "message": "down"}
    assert status["activePartitionIds"] == ""


def collect_for(service: PartitionService) -> dict:
    return build_fabric_state_status(
        partitions=service.list_partitions(),
        gpus=service.topology()["gpus"],
        service_vm={"state": "unmanaged"},
        fabric_manager={"reachable": True, "backend": service.backend},
    )


def test_publish_to_the_api(k8s, service: PartitionService, fabric: SimulatedFabric) -> None:
    service.activate(holder(1, 3), pcis(1, 3))
    fabric.inject_gpu_nvlink_failure(8)
    pub = FabricStatePublisher(k8s, "gpu-node-7", lambda: collect_for(service))
    pub.publish_once()
    api = kclient.CustomObjectsApi(k8s)
    obj = api.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, "gpu-node-7")
    assert obj["spec"] == {"node": "gpu-node-7"}
    st = obj["status"]
    assert st["activePartitionIds"] == "3"
    p3 = next(p for p in st["partitions"] if p["id"] == 3)
    assert p3["holder"] == holder(1, 3) and p3["gpus"] == [1, 3]
    assert {g["physicalId"]: g["pciBusId"] for g in st["gpus"]} == fabric.gpu_map
    assert st["failedDevices"] == [
        {"physicalId": 8, "pciBusId": fabric.gpu_map[8], "kind": "gpu", "reason": "NVLink failure on ports [0]"}
    ]
    # A second publish patches the same object.
    service.release(holder(1, 3))
    pub.publish_once()
    obj = api.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, "gpu-node-7")
    assert obj["status"]["activePartitionIds"] == ""
    assert pub.published == 2


def test_background_publisher_follows_changes(k8s, service: PartitionService) -> None:
    pub = FabricStatePublisher(k8s, "gpu-node-8", lambda: collect_for(service), interval_s=3600, debounce_s=0.01)
    service.add_listener(pub.notify)
    api = kclient.CustomObjectsApi(k8s)
    pub.start()
    try:
        service.activate(holder(5, 6, 7, 8), pcis(5, 6, 7, 8))

        def shows_partition_2() -> bool:
            try:
                obj = api.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, "gpu-node-8")
            except kclient.ApiException:
                return False
            return obj.get("status", {}).get("activePartitionIds") == "2"

        wait_for(shows_partition_2, 30, interval=0.05, what="FabricState showing partition 2 active")
    finally:
        pub.stop()
