"""Slices published from what the fabric service and the GPU leases say; binding conditions.

Against a local cluster whose kube-scheduler allocates claims from the published slices
(its DynamicResources plugin, tests/dra_driver/conftest.py: on a binding-conditions device it
waits in PreBind for the driver's verdict, binds on success and deallocates on failure) and
the real fabric service with the Fabric Manager simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from core import dra as dra_names
from core.fabric_client import FabricClient
from core.lease_store import LeaseStore
from core.topology import Partition, partition_for
from devtools.fake_sysfs import FakeBoard
from devtools.local_cluster.cluster import free_port
from devtools.waiting import wait_for
from services.dra_driver.binding import BindingWatcher
from services.dra_driver.checkpoint import Checkpoint
from services.dra_driver.publisher import SlicePublisher, gpus_from
from services.dra_driver.slices import gpus_of_devices, offered_devices
from services.fabric.bookkeeping import ActivationStore
from services.fabric.fabric_manager import simulator as fabric_sim
from services.fabric.partitions import PartitionService
from services.fabric.server import UnixServer, create_app
from tests.dra_driver.scheduling import Scheduling, claim_gpus, results


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


def slices(dra: Scheduling) -> list[dict]:
    return dra.custom.list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={dra.node}"
    )["items"]


def test_slices_follow_the_fabric_and_the_leases(dra: Scheduling, fabric: FabricClient, hgx_board: FakeBoard) -> None:
    kube, node = dra.kube, dra.node
    store = LeaseStore(kube)
    leases: list[dict] = []
    pub = SlicePublisher(kube, node, lambda: gpus_from(fabric.topology(), leases))
    assert pub.publish() is True
    first = {s["metadata"]["name"]: s for s in slices(dra)}
    assert list(first) == [f"{node}-gpucaas-gpus"] and first[f"{node}-gpucaas-gpus"]["spec"]["pool"]["generation"] == 1
    devices = first[f"{node}-gpucaas-gpus"]["spec"]["devices"]
    assert len(devices) == 8
    pci = hgx_board.physical_id_map()
    assert {d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for d in devices} == set(pci.values())
    assert pub.publish() is False  # nothing changed: nothing written

    # A lease being checked holds that GPU out (and so every partition with it), and the pool moves on.
    leases.append({"spec": {"node": node, "pciAddress": pci[3]}, "status": {"state": "Checking"}})
    assert pub.publish() is True
    now = {s["metadata"]["name"]: s for s in slices(dra)}
    assert {s["spec"]["pool"]["generation"] for s in now.values()} == {2}
    assert len(now[f"{node}-gpucaas-gpus"]["spec"]["devices"]) == 8  # every device stays, tainted or not
    assert gpus_of_devices(offered_devices(now.values())) == set(range(1, 9)) - {3}
    assert store.list(node) == []  # the publisher only reads leases

    # A restarted publisher continues above the generation the cluster holds.
    again = SlicePublisher(kube, node, lambda: gpus_from(fabric.topology(), []))
    assert again.publish() is True
    assert {s["spec"]["pool"]["generation"] for s in slices(dra)} == {3}
    again.withdraw()
    assert slices(dra) == []


def test_slices_the_driver_no_longer_publishes_are_deleted(dra: Scheduling, fabric: FabricClient) -> None:
    """A node upgraded from a release that published partition devices and GPU counters in two
    slices: its pool moves to the one slice of GPU devices, and the two old slices go."""
    kube, node = dra.kube, dra.node
    meta = {"labels": {"app.kubernetes.io/managed-by": "gpucaas-dra-driver"}}
    pool = {"name": node, "generation": 7, "resourceSliceCount": 2}
    counters = {f"gpu-{g}": {"value": "1"} for g in range(1, 9)}
    old = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpucaas-counters", **meta},
            "spec": {
                "driver": dra_names.DRIVER,
                "nodeName": node,
                "pool": pool,
                "sharedCounters": [{"name": "gpus", "counters": counters}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpucaas-partitions", **meta},
            "spec": {
                "driver": dra_names.DRIVER,
                "nodeName": node,
                "pool": pool,
                "devices": [
                    {
                        "name": "nvlink-8gpu-p0",
                        "attributes": {"gpus": {"int": 8}},
                        "consumesCounters": [{"counterSet": "gpus", "counters": counters}],
                    }
                ],
            },
        },
    ]
    for o in old:
        dra.custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", o)
    pub = SlicePublisher(kube, node, lambda: gpus_from(fabric.topology(), []))
    assert pub.publish() is True
    (now,) = slices(dra)
    assert now["metadata"]["name"] == f"{node}-gpucaas-gpus"
    assert now["spec"]["pool"] == {"name": node, "generation": 8, "resourceSliceCount": 1}
    dra.create_pod("eight", gpus=8)
    assert claim_gpus(dra.scheduled("eight")) == set(range(1, 9))


def _verdicts(dra: Scheduling, claim: str) -> set[str]:
    c = dra.claim(claim) or {}
    return {
        c["type"]
        for d in (c.get("status") or {}).get("devices") or []
        for c in d.get("conditions") or []
        if c["status"] == "True"
    }


def _rounds_until_verdict(watcher: BindingWatcher, dra: Scheduling, claim: str) -> set[str]:
    """The driver's binding loop, until it has said something about ``claim``."""

    def said() -> set[str]:
        watcher.run_once()
        return _verdicts(dra, claim)

    return wait_for(said, 60, interval=0.2, what=f"a binding verdict on claim {claim}")  # type: ignore[no-any-return]


def _partition(claim: dict) -> Partition:
    """The one NVLink partition the claim's allocated GPUs form."""
    whole = partition_for(gpus_of_devices(r["device"] for r in results(claim)))
    assert whole is not None, results(claim)
    return whole


def _unbound(dra: Scheduling, pod: str) -> bool:
    return not dra.core.read_namespaced_pod(pod, dra.namespace).spec.node_name


def test_binding_conditions_activate_before_binding_and_failures_are_reported(
    dra: Scheduling, fabric: FabricClient, fm_fabric, tmp_path: Path
) -> None:
    SlicePublisher(dra.kube, dra.node, lambda: gpus_from(fabric.topology(), []), binding_conditions=True).publish()
    watcher = BindingWatcher(dra.kube, fabric, Checkpoint(tmp_path / "cp.json"), dra.node)

    # kube-scheduler allocates in PreBind and then waits there: the pod is not bound before the verdict
    dra.create_pod("quad", gpus=4)
    quad = dra.allocated("quad")
    devs = results(quad)
    assert len(devs) == 4
    assert all(d["bindingConditions"] == [dra_names.BINDING_CONDITION] for d in devs)
    assert all(d["bindingFailureConditions"] == [dra_names.BINDING_FAILURE_CONDITION] for d in devs)
    assert _unbound(dra, "quad") and fm_fabric.active_partition_ids() == frozenset()
    assert _rounds_until_verdict(watcher, dra, quad["metadata"]["name"]) == {dra_names.BINDING_CONDITION}
    quad_partition = _partition(quad)
    assert quad_partition.size == 4 and set(fm_fabric.active_partition_ids()) == {quad_partition.id}
    assert dra.bound("quad") == dra.node  # the condition True: kube-scheduler binds

    # Another holder keeps an overlapping partition active (an admin activation of GPU 5,
    # which the next pair, {5,7} in buddy order, needs): activation fails, the claim says
    # so, and kube-scheduler deallocates it and schedules the pod again.
    pci = {int(g["physical_id"]): g["pci_bus_id"] for g in fabric.topology()["gpus"]}
    fabric.activate("admin:test", [pci[5]])
    dra.create_pod("pair", gpus=2)
    pair = dra.allocated("pair")
    name = pair["metadata"]["name"]
    assert _partition(pair).gpus == {5, 7}
    assert _rounds_until_verdict(watcher, dra, name) == {dra_names.BINDING_FAILURE_CONDITION}
    failed = [c for d in (dra.claim(name) or {})["status"]["devices"] for c in d["conditions"]]
    assert len(failed) == 2  # one verdict per device of the claim
    assert all(f["reason"] == "ActivationFailed" and "admin:test" in f["message"] for f in failed)
    wait_for(lambda: not _verdicts(dra, name), 120, what="kube-scheduler to deallocate the failed claim")
    assert _unbound(dra, "pair")

    # Once the other holder lets go, the next allocation's activation succeeds and the pod binds.
    fabric.release("admin:test")
    assert _rounds_until_verdict(watcher, dra, name) == {dra_names.BINDING_CONDITION}
    assert dra.bound("pair", 120) == dra.node
    assert _partition(dra.allocated("pair")).gpus == {5, 7}

    # The quad's pod goes before it ran (its claim, made from the template, with it): the
    # partition must not stay active without a claim.
    dra.delete_pod("quad")
    watcher.run_once()
    assert quad_partition.id not in fm_fabric.active_partition_ids()
    assert fm_fabric.active_partition_ids() == frozenset({_partition(dra.allocated("pair")).id})


def test_the_command_registers_publishes_and_prepares(
    dra: Scheduling, fabric: FabricClient, fm_fabric, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``gpucaas dra-driver`` as a process: the kubelet finds it, the scheduler sees its slices."""
    import os
    import subprocess
    import sys

    import grpc

    from services.dra_driver import api

    root = tmp_path_factory.mktemp("drv")
    env = {
        **os.environ,
        "GPUCAAS_DRA_NODE_NAME": dra.node,
        "GPUCAAS_DRA_KUBECONFIG": str(dra.cluster.admin_kubeconfig),
        "GPUCAAS_DRA_REGISTRY_DIR": str(root / "reg"),
        "GPUCAAS_DRA_PLUGINS_DIR": str(root / "plugins"),
        "GPUCAAS_DRA_STATE_DIR": str(root / "state"),
        "GPUCAAS_DRA_FABRIC_SOCKET": str(fabric.socket_path),
        "GPUCAAS_DRA_PUBLISH_INTERVAL_S": "0.2",
        "GPUCAAS_DRA_METRICS_PORT": str(metrics_port := free_port()),
    }
    proc = subprocess.Popen([sys.executable, "-m", "gpucaas", "dra-driver"], env=env)
    try:
        reg = root / "reg" / f"{dra_names.DRIVER}-reg.sock"
        wait_for(lambda: reg.exists() or proc.poll() is not None, 60, what="the registration socket")
        assert proc.poll() is None
        with grpc.insecure_channel(f"unix://{reg}") as ch:
            info = api.reg_grpc.RegistrationStub(ch).GetInfo(api.reg_pb2.InfoRequest(), timeout=10)
        assert info.type == "DRAPlugin" and info.endpoint == str(root / "plugins" / dra_names.DRIVER / "dra.sock")
        wait_for(lambda: len(slices(dra)) == 1, 60, what="the node's slice")
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        assert f'gpucaas_dra_driver_fabric_reachable{{node="{dra.node}"}} 1.0' in scraped
        assert f'gpucaas_dra_driver_gpus{{node="{dra.node}",state="allocatable"}} 8.0' in scraped
        dra.create_pod("eight", gpus=8)
        claim = dra.scheduled("eight")
        with grpc.insecure_channel(f"unix://{info.endpoint}") as ch:
            res = api.dra_grpc.DRAPluginStub(ch).NodePrepareResources(
                api.dra_pb2.NodePrepareResourcesRequest(
                    claims=[
                        api.dra_pb2.Claim(
                            namespace=dra.namespace, uid=claim["metadata"]["uid"], name=claim["metadata"]["name"]
                        )
                    ]
                ),
                timeout=30,
            )
        devices = res.claims[claim["metadata"]["uid"]].devices
        cdi_ids = [i for d in devices for i in d.cdi_device_ids]
        assert len(devices) == 8 and len(set(cdi_ids)) == 8 and all(i.startswith("nvidia.com/gpu=") for i in cdi_ids)
        assert set(fm_fabric.active_partition_ids()) == {0}
    finally:
        proc.terminate()
        proc.wait(30)
    assert not (root / "reg" / f"{dra_names.DRIVER}-reg.sock").exists()


def _driver_node(dra: Scheduling, fabric: FabricClient, root: Path):
    """The driver as ``gpucaas dra-driver`` wires it (main.build), not started: its publisher
    reads the fabric service and the leases through the driver's own discover()."""
    from services.dra_driver.main import build
    from services.dra_driver.settings import DraDriverSettings

    settings = DraDriverSettings(
        node_name=dra.node,
        fabric_socket=fabric.socket_path,
        state_dir=root / "state",
        registry_dir=root / "reg",
        plugins_dir=root / "plugins",
    )
    return build(settings, kube=dra.kube)


def test_an_unreachable_fabric_service_shows_on_the_drivers_metrics(
    dra: Scheduling, fabric: FabricClient, tmp_path: Path
) -> None:
    """The fabric alert's series in the DRA mode: 1 while the fabric service answers, 0 once a
    discovery finds it gone (the publish round logs and keeps the last slices)."""
    from core.fabric_client import FabricUnavailable

    node = _driver_node(dra, fabric, tmp_path)
    gauge = f'gpucaas_dra_driver_fabric_reachable{{node="{dra.node}"}}'
    try:
        node.discover()
        assert f"{gauge} 1.0" in generate_latest(node.metrics.registry).decode()
        node.fabric = FabricClient(tmp_path / "gone.sock")
        with pytest.raises(FabricUnavailable):
            node.discover()
        assert f"{gauge} 0.0" in generate_latest(node.metrics.registry).decode()
    finally:
        node.fabric.close()


def test_each_round_keeps_the_nodes_gpus_in_its_capacity_which_pods_may_request_beside_their_claims(
    dra: Scheduling, fabric: FabricClient, tmp_path: Path
) -> None:
    """The publish round keeps ``nvidia.com/gpu`` of the node's status capacity at its GPU count,
    putting it back when it was lost (as a kubelet registering with an empty device-plugin folder
    zeroes it). kube-scheduler then places a pod requesting ``nvidia.com/gpu: 4`` beside its claim
    by both: the DRA allocator picks a whole partition of 4, and NodeResourcesFit counts the
    extended resource against allocatable (no kubelet here derives it from capacity: the test sets
    it, to 4), so a 2-GPU pod is refused for the count while partitions of 2 remain free."""
    node = _driver_node(dra, fabric, tmp_path)
    capacity = lambda: (dra.core.read_node(dra.node).status.capacity or {}).get("nvidia.com/gpu")  # noqa: E731
    try:
        node.publish_once()
        assert capacity() == "8"
        dra.core.patch_node_status(dra.node, {"status": {"capacity": {"nvidia.com/gpu": "0"}}})
        node.publish_once()
        assert capacity() == "8"

        dra.core.patch_node_status(dra.node, {"status": {"allocatable": {"nvidia.com/gpu": "4"}}})
        dra.create_pod("quad", gpus=4, extended=True)
        assert len(claim_gpus(dra.scheduled("quad"))) == 4
        dra.create_pod("pair", gpus=2, extended=True)
        wait_for(lambda: "Insufficient nvidia.com/gpu" in (dra.verdict("pair") or ""), 60, what="pair refused")
    finally:
        node.fabric.close()


def test_a_partition_held_by_a_holder_other_than_a_claim_is_not_offered(
    dra: Scheduling, fabric: FabricClient, tmp_path: Path
) -> None:
    """A holder that is not ``claim:<uid>`` (here an admin's activation of GPU 1) keeps a
    partition active that kube-scheduler knows nothing of: every partition overlapping it
    leaves the slice, so the scheduler never picks one the fabric service would refuse
    (first fit would pick it again after every refusal), and claims go to partitions that
    work. When the holder lets go, the partitions are offered again."""
    node = _driver_node(dra, fabric, tmp_path)
    try:
        assert node.publisher.publish() is True
        offered = lambda: gpus_of_devices(offered_devices(slices(dra)))  # noqa: E731
        assert offered() == set(range(1, 9))

        pci = {int(g["physical_id"]): g["pci_bus_id"] for g in fabric.topology()["gpus"]}
        fabric.activate("admin:test", [pci[1]])
        assert node.publisher.publish() is True
        assert offered() == set(range(2, 9))
        assert all(g.allocatable for g in node.discover())  # held, not unhealthy: the health stream keeps it

        dra.create_pod("eight", gpus=8)
        dra.unschedulable("eight")  # the whole board holds GPU 1: not offered, not allocated
        dra.delete_pod("eight")
        dra.create_pod("quad", gpus=4)
        assert claim_gpus(dra.scheduled("quad")) == {5, 6, 7, 8}
        dra.create_pod("pair", gpus=2)
        assert claim_gpus(dra.scheduled("pair")) == {2, 4}  # not {1, 3}
        dra.create_pod("single", gpus=1)
        assert claim_gpus(dra.scheduled("single")) == {3}  # not 1

        # the holder goes: the next round offers GPU 1 again, and a claim gets it
        fabric.release("admin:test")
        assert node.publisher.publish() is True
        dra.create_pod("another", gpus=1)
        assert claim_gpus(dra.scheduled("another")) == {1}
    finally:
        node.fabric.close()
