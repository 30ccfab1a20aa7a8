"""The service VM under a real libvirtd + QEMU (software emulation, type='qemu').

Boots the test image (Debian cloud kernel + busybox initramfs), kills its QEMU
process, and checks the service restarts the VM and treats it as the fabric reset
it is: the partitions active before are lost, the affected pods are told (an Event
on each pod and on FabricState, ``NVLinkFabricIntact=False`` on FabricState and on
the pods' GPU leases, in the local cluster's kube-apiserver), and new 2/4/8-GPU pods get
fresh partitions; then a clean stop. PCI passthrough cannot be exercised here: this VM has no
hostdevs (``passthrough=False``); the hostdev XML is covered on the test:///
driver. Fabric Manager cannot run in this VM either, so the simulator stands for
"FM inside the service VM" (a VM restart restarts it; see services/fabric/main.py).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import libvirt
import pytest
from kubernetes import client as kclient

from core.crds import FABRICSTATE_PLURAL, GPULEASE_PLURAL, GROUP, VERSION
from core.fabric_client import FabricClient
from core.lease_store import build_gpu_lease
from devtools.fake_sysfs import build_hgx_h100
from devtools.waiting import wait_for
from services.fabric.fabric_manager.simulator import (
    SimulatedFabric,
    SimulatedFabricManager,
)
from services.fabric.main import FabricNode
from services.fabric.settings import FabricSettings
from tests.fabric.factories import holder, pcis
from tests.fabric.test_fabric_reset import fabric_events, lease_condition, make_pod
from vm_images.test_image import READY_LINE
from vm_images.test_image.daemon import PrivateLibvirtd

pytestmark = pytest.mark.libvirtd


def test_boot_crash_restart_fabric_reset_and_clean_stop(
    libvirtd: PrivateLibvirtd, test_image, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, k8s
) -> None:
    name = f"gpucaas-fabric-test-{os.getpid()}"
    board = build_hgx_h100(tmp_path / "board")
    core, custom = kclient.CoreV1Api(k8s), kclient.CustomObjectsApi(k8s)
    for bdf in pcis(*range(1, 9)):
        custom.create_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL, build_gpu_lease("gpu-node-1", bdf))
    make_pod(core, "t1", "quad")
    make_pod(core, "t2", "pair")
    console = libvirtd.workdir / "console.log"  # written by QEMU as the daemon's user
    settings = FabricSettings(
        node_name="gpu-node-1",
        socket=tmp_path_factory.mktemp("s") / "fabric.sock",
        state_dir=tmp_path / "state",
        fm_backend="simulator",
        libvirt_uri=libvirtd.uri,
        domain_type="qemu",
        domain_name=name,
        vcpus=1,
        memory_mib=256,
        kernel=test_image.kernel,
        initrd=test_image.initrd,
        kernel_cmdline="console=ttyS0 panic=-1",
        fm_channel="none",
        passthrough=False,
        console_log=console,
        watch_interval_s=0.2,
        restart_backoff_initial_s=0.5,
        reconcile_interval_s=1.0,
        publish=True,
        publish_interval_s=1.0,
        stop_vm_on_exit=True,
        stop_timeout_s=3,
        sysfs_root=board.sysfs,
        fabric_reset_policy="flag",
    )
    node = FabricNode(settings, fm=SimulatedFabricManager(SimulatedFabric(h100=True)), kube_client=k8s)
    fabric = node.fm.fabric  # type: ignore[attr-defined]
    conn = libvirt.open(libvirtd.uri)
    try:
        node.start()
        dom = conn.lookupByName(name)
        assert dom.isActive()
        wait_for(
            lambda: console.exists() and READY_LINE in console.read_text(errors="replace"),
            120,
            what="the guest to boot",
        )

        with FabricClient(settings.socket) as c:
            c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
            c.activate(holder(5, 7), pcis(5, 7))
            c.sync(
                [{"holder": holder(1, 2, 3, 4), "pod": "t1/quad"}, {"holder": holder(5, 7), "pod": "t2/pair"}],
                grace_seconds=0,
            )
            assert fabric.active_partition_ids() == {1, 5}
            assert board.reset_log() == {b: 1 for b in pcis(1, 2, 3, 4, 5, 7)}  # reset before activation
            first_id = dom.ID()
            pid = libvirtd.qemu_pid(name)
            assert pid is not None

            os.kill(pid, signal.SIGKILL)  # crash: QEMU dies
            wait_for(lambda: node.vm_restart_replays == 1, 120, what="VM restart handled")
            assert conn.lookupByName(name).ID() != first_id
            assert libvirtd.qemu_pid(name) not in (None, pid)
            assert fabric.restarts == 2  # booted with the VM, then restarted with it
            # A fabric reset, not a replay: nothing claimed active, the holders reported lost.
            assert fabric.active_partition_ids() == frozenset()
            assert {a["holder"] for a in c.activations() if a["lost"]} == {holder(1, 2, 3, 4), holder(5, 7)}
            wait_for(
                lambda: (
                    [e.reason for e in fabric_events(core, "t1")] == ["NVLinkLost"]
                    and [e.reason for e in fabric_events(core, "t2")] == ["NVLinkLost"]
                ),
                60,
                what="Events on the affected pods",
            )
            for bdf in pcis(1, 2, 3, 4, 5, 7):
                assert (lease_condition(custom, bdf, "gpu-node-1") or {}).get("status") == "False"
            wait_for(
                lambda: any(
                    x["type"] == "NVLinkFabricIntact" and x["status"] == "False"
                    for x in (
                        custom.get_cluster_custom_object(GROUP, VERSION, FABRICSTATE_PLURAL, "gpu-node-1").get("status")
                        or {}
                    ).get("conditions")
                    or []
                ),
                60,
                what="FabricState NVLinkFabricIntact=False",
            )
            wait_for(
                lambda: console.read_text(errors="replace").count(READY_LINE) >= 2, 120, what="the guest to boot again"
            )
            h = c.health()
            assert h["service_vm"] == {
                "state": "running",
                "domain": name,
                "restarts": 1,
                "crash_streak": 1,
                "message": "",
            }
            assert not any(p["active"] for p in c.partitions())
            # The flagged pods end; new 8-, 4- and 2-GPU pods get fresh partitions.
            c.sync([], grace_seconds=0)
            assert c.activate(holder(*range(1, 9)), pcis(*range(1, 9)))["partition_ids"] == [0]
            c.release(holder(*range(1, 9)))
            assert c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))["partition_ids"] == [1]
            assert c.activate(holder(5, 7), pcis(5, 7))["partition_ids"] == [5]
            assert fabric.active_partition_ids() == {1, 5}

        node.stop()  # clean stop: the VM is shut down, not restarted
        assert not dom.isActive()
        assert libvirtd.qemu_pid(name) is None
        # Nothing is left to bring it back: the VM's watcher thread has ended.
        assert not [t for t in threading.enumerate() if t.name == f"watch-{name}"]
        assert not dom.isActive()

        # The service comes back (DaemonSet pod restarted): it reuses the domain and boots it.
        # Booting the VM resets the NVSwitches: the records it kept are lost, not replayed.
        node = FabricNode(settings, fm=node.fm, kube_client=k8s)
        node.start()
        assert node.vm is not None and node.vm.reused
        assert [d.name() for d in conn.listAllDomains()].count(name) == 1
        assert conn.lookupByName(name).isActive()
        assert fabric.restarts == 3
        assert fabric.active_partition_ids() == frozenset()
        assert node.service.status.fabric_resets == 1
        node.stop()
        assert not conn.lookupByName(name).isActive()
    finally:
        node.stop()
        try:
            d = conn.lookupByName(name)
            if d.isActive():
                d.destroy()
            d.undefine()
        except libvirt.libvirtError:
            pass
        conn.close()
