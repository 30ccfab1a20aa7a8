"""The DRA driver as the kubelet sees it: registration, Prepare/Unprepare, health, restart.

The kubelet side is played by this test over the real gRPC protocols on unix sockets;
claims live in a local cluster whose kube-scheduler allocates them (its DynamicResources
plugin, tests/dra_driver/conftest.py) from the slices the driver's publisher writes for a
fake GPU node; partitions are activated by the real fabric service with the Fabric Manager
simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from core import dra as dra_names
from core.fabric_client import FabricClient
from core.topology import partition_for
from devtools.fake_sysfs import FakeBoard
from devtools.waiting import wait_for
from services.dra_driver import api
from services.dra_driver.checkpoint import Checkpoint
from services.dra_driver.driver import Driver
from services.dra_driver.publisher import SlicePublisher
from services.dra_driver.server import DraServer, HealthBoard
from services.dra_driver.slices import PublishedGpu, gpus_of_devices
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager import simulator as fabric_sim
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app
from tests.dra_driver.scheduling import Scheduling


@pytest.fixture
def sockets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # unix socket paths must stay short (108 bytes)
    return tmp_path_factory.mktemp("dra")


@pytest.fixture
def fm_fabric(hgx_board: FakeBoard):
    return fabric_sim.SimulatedFabric(hgx_board.physical_id_map())


@pytest.fixture
def fabric_socket(fm_fabric, sockets: Path, tmp_path: Path) -> Iterator[Path]:
    store = ActivationStore(tmp_path / "fabric-state").open()
    service = PartitionService(fabric_sim.SimulatedFabricManager(fm_fabric), store)
    server = UnixServer(create_app(service), sockets / "fabric.sock")
    server.start()
    try:
        yield sockets / "fabric.sock"
    finally:
        server.stop()
        store.close()


class Node:
    """The driver of one node, restartable with the same checkpoint file."""

    def __init__(
        self, name: str, board: FakeBoard, fabric_socket: Path, sockets: Path, k8s: client.ApiClient, state: Path
    ) -> None:
        self.name, self.board, self.fabric_socket, self.sockets, self.k8s, self.state = (
            name,
            board,
            fabric_socket,
            sockets,
            k8s,
            state,
        )
        self.server: DraServer | None = None
        self.fabric: FabricClient | None = None
        self.driver: Driver | None = None

    def start(self) -> DraServer:
        objects = client.CustomObjectsApi(self.k8s)
        self.fabric = FabricClient(self.fabric_socket)
        driver = self.driver = Driver(
            node_name=self.name,
            checkpoint=Checkpoint(self.state / "checkpoint.json"),
            fabric=self.fabric,
            read_claim=lambda ns, name: objects.get_namespaced_custom_object(
                "resource.k8s.io", "v1", ns, "resourceclaims", name
            ),
            physical_to_pci=self.board.physical_id_map,
            cdi_id=lambda bdf: f"nvidia.com/gpu={bdf}",
        )
        health = HealthBoard({g: (True, "") for g in self.board.physical_id_map()})
        self.server = DraServer(
            driver, health, registry_dir=self.sockets / "registry", plugins_dir=self.sockets / "plugins"
        )
        self.server.start()
        return self.server

    def stop(self) -> None:
        if self.server:
            self.server.stop()
            self.server = None
        if self.fabric:
            self.fabric.close()


@pytest.fixture
def node(dra: Scheduling, hgx_board: FakeBoard, fabric_socket: Path, sockets: Path, tmp_path: Path) -> Iterator[Node]:
    """The driver of the test's GPU node, its slices published (what kube-scheduler allocates from)."""
    gpus = [PublishedGpu(pid, bdf) for pid, bdf in hgx_board.physical_id_map().items()]
    SlicePublisher(dra.kube, dra.node, lambda: gpus).publish()
    n = Node(dra.node, hgx_board, fabric_socket, sockets, dra.k8s, tmp_path / "dra-state")
    n.start()
    try:
        yield n
    finally:
        n.stop()


def kubelet_call(sock: Path, stub_cls, method: str, request):
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return getattr(stub_cls(ch), method)(request, timeout=10)


def make_claim(dra: Scheduling, name: str, gpus: int) -> dict:
    """A ResourceClaim and a pod using it, which kube-scheduler places on the node: the allocated claim."""
    dra.create_claim(name, gpus)
    dra.create_pod(f"pod-{name}", claim=name)
    return dra.scheduled(f"pod-{name}")


def prepare(node: Node, *claims: dict):
    req = api.dra_pb2.NodePrepareResourcesRequest(
        claims=[
            api.dra_pb2.Claim(
                namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"], name=c["metadata"]["name"]
            )
            for c in claims
        ]
    )
    return kubelet_call(node.server.endpoint, api.dra_grpc.DRAPluginStub, "NodePrepareResources", req)


def unprepare(node: Node, *claims: dict):
    req = api.dra_pb2.NodeUnprepareResourcesRequest(
        claims=[
            api.dra_pb2.Claim(
                namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"], name=c["metadata"]["name"]
            )
            for c in claims
        ]
    )
    return kubelet_call(node.server.endpoint, api.dra_grpc.DRAPluginStub, "NodeUnprepareResources", req)


def test_registration_announces_a_dra_plugin_and_its_endpoint(node: Node) -> None:
    info = kubelet_call(
        node.server.registration_socket, api.reg_grpc.RegistrationStub, "GetInfo", api.reg_pb2.InfoRequest()
    )
    assert info.type == "DRAPlugin" and info.name == dra_names.DRIVER
    assert info.endpoint == str(node.sockets / "plugins" / dra_names.DRIVER / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    kubelet_call(
        node.server.registration_socket,
        api.reg_grpc.RegistrationStub,
        "NotifyRegistrationStatus",
        api.reg_pb2.RegistrationStatus(plugin_registered=True),
    )
    assert node.server.registration.registered.is_set()


def test_prepare_activates_the_partition_and_returns_its_cdi_ids_once(
    node: Node, dra: Scheduling, fm_fabric, hgx_board: FakeBoard
) -> None:
    pair = make_claim(dra, "pair", 2)
    quad = make_claim(dra, "quad", 4)
    answer = prepare(node, pair, quad)
    by_uid = {c["metadata"]["uid"]: c for c in (pair, quad)}
    pci = hgx_board.physical_id_map()
    active = set()
    for uid, res in answer.claims.items():
        assert res.error == ""
        gpus = gpus_of_devices(d.device_name for d in res.devices)  # a device per GPU
        partition = partition_for(gpus)
        assert partition is not None and len(res.devices) == len(gpus)
        assert len(partition.gpus) == {"pair": 2, "quad": 4}[by_uid[uid]["metadata"]["name"]]
        for dev in res.devices:  # each its GPU's CDI id
            (gpu,) = gpus_of_devices([dev.device_name])
            assert list(dev.cdi_device_ids) == [f"nvidia.com/gpu={pci[gpu]}"]
            assert dev.pool_name == dra.node and list(dev.request_names) == ["gpus"]
        active.add(partition.id)
    assert len(active) == 2 and set(fm_fabric.active_partition_ids()) == active
    again = prepare(node, pair)
    assert again.claims[pair["metadata"]["uid"]] == answer.claims[pair["metadata"]["uid"]]
    assert set(fm_fabric.active_partition_ids()) == active


def test_unprepare_after_a_plugin_restart_releases_the_partition(node: Node, dra: Scheduling, fm_fabric) -> None:
    claim = make_claim(dra, "eight", 8)
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    assert set(fm_fabric.active_partition_ids()) == {0}
    node.stop()
    dra.delete_pod("pod-eight")
    dra.custom.delete_namespaced_custom_object("resource.k8s.io", "v1", dra.namespace, "resourceclaims", "eight")
    wait_for(lambda: dra.claim("eight") is None, what="claim eight gone")
    node.start()
    res = unprepare(node, claim)
    assert res.claims[claim["metadata"]["uid"]].error == ""
    assert fm_fabric.active_partition_ids() == frozenset()
    assert unprepare(node, claim).claims[claim["metadata"]["uid"]].error == ""  # idempotent


def test_a_recreated_claim_with_another_uid_is_refused(node: Node, dra: Scheduling, fm_fabric) -> None:
    claim = make_claim(dra, "single", 1)
    stale = {**claim, "metadata": {**claim["metadata"], "uid": "00000000-dead-beef-0000-000000000000"}}
    res = prepare(node, stale).claims[stale["metadata"]["uid"]]
    assert "deleted and re-created" in res.error and not res.devices
    assert fm_fabric.active_partition_ids() == frozenset()


def test_an_unhealthy_gpu_marks_its_device(node: Node, hgx_board: FakeBoard) -> None:
    with grpc.insecure_channel(f"unix://{node.server.endpoint}") as ch:
        stream = api.health_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            api.health_pb2.NodeWatchResourcesRequest(), timeout=30
        )
        first = next(stream)
        assert len(first.devices) == 8
        assert all(d.health == api.health_pb2.HEALTHY for d in first.devices)
        health = {g: (True, "") for g in hgx_board.physical_id_map()}
        health[3] = (False, "firmware check failed")
        node.server.board.update(health)
        second = next(stream)
        sick = {d.device.device_name for d in second.devices if d.health == api.health_pb2.UNHEALTHY}
        assert gpus_of_devices(sick) == {3}
        assert all(
            "GPU 3: firmware check failed" in d.message for d in second.devices if d.health == api.health_pb2.UNHEALTHY
        )
        stream.cancel()
    wait_for(lambda: True, timeout=1)


def test_the_pod_is_told_once_that_its_partition_is_active(node: Node, dra: Scheduling, fm_fabric) -> None:
    """The kubelet posts nothing for a prepared claim: the driver's PartitionActivated Event on
    the pod is what ``kubectl describe pod`` and the API's timeline show (once, not per retry)."""
    from core.kube import Kube
    from services.dra_driver.main import ACTIVATED_REASON, activation_event

    node.driver.activated_listeners.append(activation_event(Kube.of(dra.k8s), dra.node))
    dra.create_claim("pair", 2)
    dra.create_pod("trainer", claim="pair")
    claim = dra.scheduled("trainer")  # reserved for the trainer by kube-scheduler
    prepare(node, claim)
    prepare(node, claim)  # the kubelet asking again after its restart: no second Event

    def announced() -> list:
        return [e for e in dra.core.list_namespaced_event(dra.namespace).items if e.reason == ACTIVATED_REASON]

    [event] = wait_for(announced, what="the PartitionActivated Event")
    trainer = dra.core.read_namespaced_pod("trainer", dra.namespace)
    assert (event.involved_object.kind, event.involved_object.name) == ("Pod", "trainer")
    assert event.involved_object.uid in (None, "", trainer.metadata.uid)
    assert event.message.startswith(f"2 GPU(s) allocated on {dra.node}: ") and "claim pair" in event.message
    assert len(announced()) == 1
