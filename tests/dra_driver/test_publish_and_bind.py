"""Slices published from what the fabric service and the GPU leases say; binding conditions.

Against the Kubernetes API emulator (over HTTP, as production) and the real fabric service
with the Fabric Manager simulator. The scheduler's side of binding conditions (wait in
PreBind for the conditions, deallocate on failure) is played by the test with the
stand-in allocator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gpucaas.core import dra
from gpucaas.core.fabric_client import FabricClient
from gpucaas.core.kube import Kube
from gpucaas.core.lease_store import LeaseStore
from gpucaas.core.topology import partition_by_id
from gpucaas.devtools.dra_allocator import allocate
from gpucaas.devtools.fake_sysfs import FakeBoard
from services.dra_driver.binding import BindingWatcher
from services.dra_driver.checkpoint import Checkpoint
from services.dra_driver.publisher import SlicePublisher, gpus_from
from services.dra_driver.slices import partition_of_device
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager import simulator as fabric_sim
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app

NODE = "gpu-node-a"
NS = "tenant-a"
CLASSES = {dra.device_class_name(s): dra.device_class(s) for s in (1, 2, 4, 8)}


@pytest.fixture
def fm_fabric(hgx_board: FakeBoard):
    return fabric_sim.SimulatedFabric(hgx_board.physical_id_map())


@pytest.fixture
def fabric(fm_fabric, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Iterator[FabricClient]:
    sock = tmp_path_factory.mktemp("fab") / "fabric.sock"
    store = ActivationStore(tmp_path / "fabric-state").open()
    server = UnixServer(create_app(PartitionService(fabric_sim.SimulatedFabricManager(fm_fabric), store)), sock)
    server.start()
    fc = FabricClient(sock)
    try:
        yield fc
    finally:
        fc.close()
        server.stop()
        store.close()


@pytest.fixture
def kube(k8s: client.ApiClient) -> Kube:
    client.CoreV1Api(k8s).create_namespace({"metadata": {"name": NS}})
    return Kube.of(k8s)


def slices(kube: Kube) -> list[dict]:
    return kube.custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                  field_selector=f"spec.nodeName={NODE}")["items"]


def test_slices_follow_the_fabric_and_the_leases(kube: Kube, fabric: FabricClient, hgx_board: FakeBoard) -> None:
    store = LeaseStore(kube)
    leases: list[dict] = []
    pub = SlicePublisher(kube, NODE, lambda: gpus_from(fabric.topology(), leases))
    assert pub.publish() is True
    first = {s["metadata"]["name"]: s for s in slices(kube)}
    assert len(first) == 2 and {s["spec"]["pool"]["generation"] for s in first.values()} == {1}
    parts = first[f"{NODE}-gpucaas-partitions"]["spec"]["devices"]
    assert len(parts) == 15
    pci = hgx_board.physical_id_map()
    singles = {d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for d in parts
               if d["attributes"]["gpus"]["int"] == 1}
    assert singles == set(pci.values())
    assert pub.publish() is False  # nothing changed: nothing written

    # A lease being checked holds every partition with that GPU out, and the pool moves on.
    leases.append({"spec": {"node": NODE, "pciAddress": pci[3]}, "status": {"state": "Checking"}})
    assert pub.publish() is True
    now = {s["metadata"]["name"]: s for s in slices(kube)}
    assert {s["spec"]["pool"]["generation"] for s in now.values()} == {2}
    held = {partition_of_device(d["name"]) for d in now[f"{NODE}-gpucaas-partitions"]["spec"]["devices"]}
    assert all(3 not in partition_by_id(p).gpus for p in held)
    assert len(held) == 15 - 4  # the board, quad 1, pair {1,3} and the single GPU 3
    assert store.list(NODE) == []  # the publisher only reads leases

    # A restarted publisher continues above the generation the cluster holds.
    again = SlicePublisher(kube, NODE, lambda: gpus_from(fabric.topology(), []))
    assert again.publish() is True
    assert {s["spec"]["pool"]["generation"] for s in slices(kube)} == {3}
    again.withdraw()
    assert slices(kube) == []


def _allocated_claim(kube: Kube, name: str, gpus: int, published: list[dict], taken: list) -> dict:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [dra.claim_request(gpus)]}}}
    claim = kube.custom.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", body)
    got = allocate(claim, NODE, published, CLASSES, taken)
    assert got is not None
    taken.extend(d.ref for d in got)
    claim["status"] = {"allocation": {"devices": {"results": [d.as_result() for d in got]}}}
    return kube.custom.replace_namespaced_custom_object_status("resource.k8s.io", "v1", NS, "resourceclaims", name,
                                                               claim)


def _verdicts(kube: Kube, name: str) -> set[str]:
    claim = kube.custom.get_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", name)
    return {c["type"] for d in (claim.get("status") or {}).get("devices") or [] for c in d.get("conditions") or []
            if c["status"] == "True"}


def test_binding_conditions_activate_before_binding_and_failures_are_reported(
        kube: Kube, fabric: FabricClient, fm_fabric, tmp_path: Path) -> None:
    SlicePublisher(kube, NODE, lambda: gpus_from(fabric.topology(), []), binding_conditions=True).publish()
    published = slices(kube)
    watcher = BindingWatcher(kube, fabric, Checkpoint(tmp_path / "cp.json"), NODE)
    taken: list = []
    quad = _allocated_claim(kube, "quad", 4, published, taken)
    watcher.run_once()
    assert _verdicts(kube, "quad") == {dra.BINDING_CONDITION}
    (dev,) = quad["status"]["allocation"]["devices"]["results"]
    assert set(fm_fabric.active_partition_ids()) == {partition_of_device(dev["device"])}

    # Another holder keeps an overlapping partition active (an admin activation of GPU 5,
    # which the next pair, {5,7} in buddy order, needs): activation fails, the claim says
    # so, and the scheduler would deallocate it and try elsewhere.
    pci = {int(g["physical_id"]): g["pci_bus_id"] for g in fabric.topology()["gpus"]}
    fabric.activate("admin:test", [pci[5]])
    pair = _allocated_claim(kube, "pair", 2, published, taken)
    (res,) = pair["status"]["allocation"]["devices"]["results"]
    assert partition_by_id(partition_of_device(res["device"])).gpus == frozenset({5, 7})
    watcher.run_once()
    assert _verdicts(kube, "pair") == {dra.BINDING_FAILURE_CONDITION}
    claim = kube.custom.get_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", "pair")
    (failed,) = [c for d in claim["status"]["devices"] for c in d["conditions"]]
    assert failed["reason"] == "ActivationFailed" and "admin:test" in failed["message"]

    # The scheduler gives up on the quad's pod (binding timeout) and deallocates its claim:
    # the partition must not stay active without a claim.
    quad = kube.custom.get_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims", "quad")
    quad["status"] = {}
    kube.custom.replace_namespaced_custom_object_status("resource.k8s.io", "v1", NS, "resourceclaims", "quad", quad)
    watcher.run_once()
    assert partition_of_device(dev["device"]) not in fm_fabric.active_partition_ids()


def test_the_command_registers_publishes_and_prepares(kube: Kube, fabric: FabricClient, fm_fabric, kubeconfig: Path,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    """``gpucaas dra-driver`` as a process: the kubelet finds it, the scheduler sees its slices."""
    import os
    import subprocess
    import sys

    import grpc

    from gpucaas.devtools.waiting import wait_for
    from services.dra_driver import api

    root = tmp_path_factory.mktemp("drv")
    env = {**os.environ, "GPUCAAS_DRA_NODE_NAME": NODE, "GPUCAAS_DRA_KUBECONFIG": str(kubeconfig),
           "GPUCAAS_DRA_REGISTRY_DIR": str(root / "reg"), "GPUCAAS_DRA_PLUGINS_DIR": str(root / "plugins"),
           "GPUCAAS_DRA_STATE_DIR": str(root / "state"), "GPUCAAS_DRA_FABRIC_SOCKET": str(fabric.socket_path),
           "GPUCAAS_DRA_PUBLISH_INTERVAL_S": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "gpucaas", "dra-driver"], env=env)
    try:
        reg = root / "reg" / f"{dra.DRIVER}-reg.sock"
        wait_for(lambda: reg.exists() or proc.poll() is not None, 60, what="the registration socket")
        assert proc.poll() is None
        with grpc.insecure_channel(f"unix://{reg}") as ch:
            info = api.reg_grpc.RegistrationStub(ch).GetInfo(api.reg_pb2.InfoRequest(), timeout=10)
        assert info.type == "DRAPlugin" and info.endpoint == str(root / "plugins" / dra.DRIVER / "dra.sock")
        wait_for(lambda: len(slices(kube)) == 2, 60, what="the node's two slices")
        taken: list = []
        claim = _allocated_claim(kube, "eight", 8, slices(kube), taken)
        with grpc.insecure_channel(f"unix://{info.endpoint}") as ch:
            res = api.dra_grpc.DRAPluginStub(ch).NodePrepareResources(api.dra_pb2.NodePrepareResourcesRequest(
                claims=[api.dra_pb2.Claim(namespace=NS, uid=claim["metadata"]["uid"], name="eight")]), timeout=30)
        (dev,) = res.claims[claim["metadata"]["uid"]].devices
        assert len(dev.cdi_device_ids) == 8 and all(i.startswith("nvidia.com/gpu=") for i in dev.cdi_device_ids)
        assert set(fm_fabric.active_partition_ids()) == {0}
    finally:
        proc.terminate()
        proc.wait(30)
    assert not (root / "reg" / f"{dra.DRIVER}-reg.sock").exists()
