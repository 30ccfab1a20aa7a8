"""The service VM under a real libvirtd + QEMU (software emulation, type='qemu').

Boots the test image (Debian cloud kernel + busybox initramfs), kills its QEMU
process, and checks the service restarts the VM and replays the partitions;
then a clean stop. PCI passthrough cannot be exercised here: this VM has no
hostdevs (``passthrough=False``); the hostdev XML is covered on the test:///
driver. Fabric Manager cannot run in this VM either, so the simulator stands for
"FM inside the service VM" (a VM restart restarts it; see services/fabric/runtime.py).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import libvirt
import pytest

from gpucaas.core.fabric_client import FabricClient
from gpucaas.devtools.waiting import wait_for
from services.fabric.fabric_manager.simulator import (
    SimulatedFabric,
    SimulatedFabricManager,
)
from services.fabric.runtime import FabricNode
from services.fabric.settings import FabricSettings
from tests.fabric.factories import holder, pcis
from vm_images.test_image import READY_LINE
from vm_images.test_image.daemon import PrivateLibvirtd

pytestmark = pytest.mark.libvirtd



def test_boot_crash_restart_replay_and_clean_stop(
    libvirtd: PrivateLibvirtd, test_image, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    name = f"gpucaas-fabric-test-{os.getpid()}"
    console = libvirtd.workdir / "console.log"  # written by QEMU as the daemon's user
    settings = FabricSettings(
        node_name="gpu-node-1", socket=tmp_path_factory.mktemp("s") / "fabric.sock",
        state_dir=tmp_path / "state", fm_backend="simulator", libvirt_uri=libvirtd.uri,
        domain_type="qemu", domain_name=name, vcpus=1, memory_mib=256,
        kernel=test_image.kernel, initrd=test_image.initrd, kernel_cmdline="console=ttyS0 panic=-1",
        fm_channel="none", passthrough=False, console_log=console, watch_interval_s=0.2, restart_backoff_initial_s=0.5,
        reconcile_interval_s=1.0, publish=False, stop_vm_on_exit=True, stop_timeout_s=3,
    )
    node = FabricNode(settings, fm=SimulatedFabricManager(SimulatedFabric()))
    fabric = node.fm.fabric  # type: ignore[attr-defined]
    conn = libvirt.open(libvirtd.uri)
    try:
        node.start()
        dom = conn.lookupByName(name)
        assert dom.isActive()
        wait_for(lambda: console.exists() and READY_LINE in console.read_text(errors="replace"),
                 120, what="the guest to boot")

        with FabricClient(settings.socket) as c:
            c.activate(holder(1, 2, 3, 4), pcis(1, 2, 3, 4))
            c.activate(holder(5, 7), pcis(5, 7))
            assert fabric.active_partition_ids() == {1, 5}
            first_id = dom.ID()
            pid = libvirtd.qemu_pid(name)
            assert pid is not None

            os.kill(pid, signal.SIGKILL)  # crash: QEMU dies
            wait_for(lambda: node.vm_restart_replays == 1, 120, what="VM restart + replay")
            assert conn.lookupByName(name).ID() != first_id
            assert libvirtd.qemu_pid(name) not in (None, pid)
            assert fabric.restarts == 2  # booted with the VM, then restarted with it
            assert fabric.active_partition_ids() == {1, 5}  # replayed
            wait_for(lambda: console.read_text(errors="replace").count(READY_LINE) >= 2, 120,
                     what="the guest to boot again")
            h = c.health()
            assert h["service_vm"] == {"state": "running", "domain": name, "restarts": 1, "crash_streak": 1,
                                      "message": ""}
            assert {p["id"] for p in c.partitions() if p["active"]} == {1, 5}

        node.stop()  # clean stop: the VM is shut down, not restarted
        assert not dom.isActive()
        assert libvirtd.qemu_pid(name) is None
        # Nothing is left to bring it back: the VM's watcher thread has ended.
        assert not [t for t in threading.enumerate() if t.name == f"watch-{name}"]
        assert not dom.isActive()

        # The service comes back (DaemonSet pod restarted): it reuses the domain, boots it,
        # and replays the records it kept on disk into the fresh Fabric Manager.
        node = FabricNode(settings, fm=node.fm)
        node.start()
        assert node.vm is not None and node.vm.reused
        assert [d.name() for d in conn.listAllDomains()].count(name) == 1
        assert conn.lookupByName(name).isActive()
        assert fabric.restarts == 3
        assert fabric.active_partition_ids() == {1, 5}
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
