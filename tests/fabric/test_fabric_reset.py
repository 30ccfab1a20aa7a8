"""Service VM restart = fabric reset, seen from Kubernetes (test:/// libvirt, the local cluster's kube-apiserver).

The holders whose partitions the reset destroyed are reported: an Event on FabricState and
on each pod, ``NVLinkFabricIntact=False`` on FabricState and on the pods' GPU leases, and
with ``fabric_reset_policy=evict`` the pods are evicted. The real-libvirtd version of the
crash lives in test_service_vm_libvirtd.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest
from kubernetes import client as kclient

from core.crds import FABRICSTATE_PLURAL, GPULEASE_PLURAL, GROUP, VERSION
from core.fabric_client import FabricClient
from core.lease_store import build_gpu_lease, lease_name
from devtools.fake_sysfs import build_hgx_h100
from devtools.waiting import wait_for
from services.fabric.fabric_manager.simulator import SimulatedFabric, SimulatedFabricManager
from services.fabric.main import FabricNode
from services.fabric.settings import FabricSettings
from tests.fabric.factories import holder, pcis

NODE = "gpu-node-r"


def make_pod(core: kclient.CoreV1Api, ns: str, name: str) -> None:
    try:
        core.create_namespace(kclient.V1Namespace(metadata=kclient.V1ObjectMeta(name=ns)))
    except kclient.ApiException as exc:
        if exc.status != 409:
            raise
    core.create_namespaced_pod(
        ns,
        kclient.V1Pod(
            metadata=kclient.V1ObjectMeta(name=name, namespace=ns),
            spec=kclient.V1PodSpec(node_name=NODE, containers=[kclient.V1Container(name="c", image="busybox")]),
        ),
    )


def fabric_events(core: kclient.CoreV1Api, ns: str) -> list[kclient.CoreV1Event]:
    return [e for e in core.list_namespaced_event(ns).items if e.source and e.source.component == "gpucaas-fabric"]


def lease_condition(custom: kclient.CustomObjectsApi, bdf: str, node: str = NODE) -> dict | None:
    lease = custom.get_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL, lease_name(node, bdf))
    return next(
        (c for c in (lease.get("status") or {}).get("conditions") or [] if c["type"] == "NVLinkFabricIntact"), None
    )


def start_node(tmp_path: Path, sock_dir: Path, k8s, policy: str) -> FabricNode:
    board = build_hgx_h100(tmp_path / "board")
    settings = FabricSettings(
        node_name=NODE,
        socket=sock_dir / "fabric.sock",
        state_dir=tmp_path / "state",
        sysfs_root=board.sysfs,
        fm_backend="simulator",
        libvirt_uri="test:///default",
        domain_type="test",
        domain_name=f"fabric-{tmp_path.name}",
        disk_image=tmp_path / "service-vm.qcow2",
        fm_channel="none",
        watch_interval_s=0.05,
        restart_backoff_initial_s=0.01,
        restart_backoff_max_s=0.05,
        reconcile_interval_s=0.2,
        publish=True,
        publish_interval_s=0.5,
        stop_vm_on_exit=True,
        fabric_reset_policy=policy,  # type: ignore[arg-type]
    )
    node = FabricNode(settings, fm=SimulatedFabricManager(SimulatedFabric(h100=True)), kube_client=k8s)
    node.start()
    return node


@pytest.fixture
def custom(k8s) -> kclient.CustomObjectsApi:
    return kclient.CustomObjectsApi(k8s)


@pytest.fixture
def core(k8s) -> kclient.CoreV1Api:
    return kclient.CoreV1Api(k8s)


@pytest.fixture(params=["flag", "evict"])
def node(request, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, k8s, custom) -> Iterator[FabricNode]:
    for bdf in pcis(*range(1, 9)):
        custom.create_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL, build_gpu_lease(NODE, bdf))
    n = start_node(tmp_path, tmp_path_factory.mktemp("s"), k8s, request.param)
    yield n
    n.stop()
    n.vm.undefine()


def crash_vm(node: FabricNode) -> None:
    conn = libvirt.open("test:///default")
    try:
        conn.lookupByName(node.settings.domain_name).destroy()
    finally:
        conn.close()
    wait_for(lambda: node.vm_restart_replays == 1, 60, interval=0.02, what="VM restart handled")


def test_vm_restart_reports_lost_fabric_and_new_pods_get_fresh_partitions(node: FabricNode, core, custom) -> None:
    policy = node.settings.fabric_reset_policy
    make_pod(core, "t1", "quad")
    make_pod(core, "t2", "pair")
    with FabricClient(node.settings.socket) as c:
        c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
        c.activate(holder(5, 7), pcis(5, 7))
        c.sync(
            [{"holder": holder(1, 2, 3, 4), "pod": "t1/quad"}, {"holder": holder(5, 7), "pod": "t2/pair"}],
            grace_seconds=0,
        )
        crash_vm(node)

        # Events: on FabricState (namespace default) and on each affected pod.
        wait_for(
            lambda: len(fabric_events(core, "t1")) == 1 and len(fabric_events(core, "t2")) == 1,
            30,
            what="Events on the affected pods",
        )
        ev = fabric_events(core, "t1")[0]
        assert ev.reason == "NVLinkLost" and ev.type == "Warning"
        assert ev.involved_object.kind == "Pod" and ev.involved_object.name == "quad"
        assert [e.reason for e in fabric_events(core, "default")] == ["FabricReset"]
        # The condition on the holders' GPU leases (and only theirs).
        for bdf in pcis(1, 2, 3, 4, 5, 7):
            cond = lease_condition(custom, bdf)
            assert cond is not None and cond["status"] == "False" and cond["reason"] == "FabricReset"
        assert lease_condition(custom, pcis(6)[0]) is None
        # The condition on FabricState, with the holders listed.

        def fabricstate_lost() -> dict | None:
            st = custom.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, NODE).get("status") or {}
            conds = {x["type"]: x for x in st.get("conditions") or []}
            return st if conds.get("NVLinkFabricIntact", {}).get("status") == "False" else None

        st = wait_for(fabricstate_lost, 30, what="FabricState NVLinkFabricIntact=False")
        assert {x["pod"] for x in st["lostPartitions"]} == {"t1/quad", "t2/pair"}
        # Policy: evict removes the pods; flag leaves them running (flagged).
        report = wait_for(lambda: node.last_reset_report, 30, what="the reset reported")
        assert report.get("errors") == []

        def pods() -> dict[str, bool]:
            """name -> being deleted"""
            return {
                p.metadata.name: p.metadata.deletion_timestamp is not None
                for ns in ("t1", "t2")
                for p in core.list_namespaced_pod(ns).items
            }

        if policy == "evict":
            assert sorted(report["evicted"]) == ["t1/quad", "t2/pair"]
            # The eviction starts a graceful deletion; the node's kubelet ends it.
            wait_for(lambda: not pods(), 30, what="the evicted pods gone")
        else:
            assert report["evicted"] == [] and pods() == {"quad": False, "pair": False}

        # New 2/4/8-GPU pods get fresh partitions once the old holders are gone.
        c.sync([], grace_seconds=0)
        assert c.activate(holder(5, 6, 7, 8), pcis(5, 6, 7, 8))["partition_ids"] == [2]
        assert c.activate(holder(1, 3), pcis(1, 3))["partition_ids"] == [3]
        c.release(holder(5, 6, 7, 8))
        c.release(holder(1, 3))
        assert c.activate(holder(*range(1, 9)), pcis(*range(1, 9)))["partition_ids"] == [0]
        # And FabricState says the fabric is intact again.
        wait_for(
            lambda: (
                {
                    x["type"]: x
                    for x in (
                        custom.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, NODE).get("status") or {}
                    ).get("conditions")
                    or []
                }.get("NVLinkFabricIntact", {}).get("status")
                == "True"
            ),
            30,
            what="NVLinkFabricIntact=True",
        )


def test_a_report_kubernetes_refused_is_retried(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, k8s, core, custom
) -> None:
    """The pod's namespace does not exist when the fabric resets (the Event is refused); the
    reconcile loop keeps trying until Kubernetes takes it."""
    node = start_node(tmp_path, tmp_path_factory.mktemp("s"), k8s, "flag")
    try:
        with FabricClient(node.settings.socket) as c:
            c.activate(holder(2, 4), pcis(2, 4))
            c.sync([{"holder": holder(2, 4), "pod": "late/pair"}], grace_seconds=0)
            crash_vm(node)
            wait_for(lambda: node.last_reset_report is not None, 30, what="the first report")
            assert node.last_reset_report["reported"] == []  # refused: namespace "late" is missing
            assert any("event on pod late/pair" in e for e in node.last_reset_report["errors"])
            core.create_namespace(kclient.V1Namespace(metadata=kclient.V1ObjectMeta(name="late")))
            wait_for(lambda: node.last_reset_report["reported"] == [holder(2, 4)], 30, what="the retried report")
            assert [e.reason for e in fabric_events(core, "late")] == ["NVLinkLost"]
            assert not node._unreported
    finally:
        node.stop()
        node.vm.undefine()
