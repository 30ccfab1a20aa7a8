"""The service VM domain XML: pure builder, then defined and started on libvirt's test:/// driver."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from devtools.fake_sysfs import MEMORY_CONTROLLER_BDF, NVSWITCH_BDFS, build_hgx_h100
from services.fabric.discovery import discover_fabric_devices
from services.fabric.domain_xml import CHANNEL_NAME, DomainSpec, build_domain_xml, hostdev_addresses, spec_hash
from services.fabric.errors import DomainXMLError
from services.fabric.main import domain_spec, passthrough_devices
from services.fabric.service_vm import BackoffPolicy, ServiceVM
from services.fabric.settings import FabricSettings
from vm_images.domain import template_text

ALL = (*NVSWITCH_BDFS, MEMORY_CONTROLLER_BDF)


def spec(**kw) -> DomainSpec:
    base = dict(
        name="gpucaas-fabric-t",
        domain_type="qemu",
        vcpus=2,
        memory_mib=1024,
        hostdevs=ALL,
        disk_image="/var/lib/gpucaas/fabric/service-vm.qcow2",
        node="node-a",
    )
    return DomainSpec(**{**base, **kw})


@pytest.fixture
def test_conn() -> Iterator[libvirt.virConnect]:
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors come back as exceptions
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()


def test_builder_fills_the_template() -> None:
    root = ET.fromstring(build_domain_xml(spec(), template_text()))
    assert root.get("type") == "qemu"
    assert root.findtext("name") == "gpucaas-fabric-t"
    assert root.find("memory").text == "1024" and root.find("memory").get("unit") == "MiB"
    assert root.findtext("vcpu") == "2"
    assert root.find("cpu") is None  # TCG takes QEMU's default model
    assert root.find("os/boot").get("dev") == "hd"
    disk = root.find("devices/disk")
    assert disk.find("source").get("file") == "/var/lib/gpucaas/fabric/service-vm.qcow2"
    assert disk.find("driver").get("type") == "qcow2"
    iface = root.find("devices/interface")
    assert iface.get("type") == "network" and iface.find("source").get("network") == "gpucaas-fabric"
    hostdevs = root.findall("devices/hostdev")
    assert all(h.get("managed") == "yes" and h.get("type") == "pci" for h in hostdevs)
    assert hostdev_addresses(ET.tostring(root, encoding="unicode")) == list(ALL)
    mc = hostdevs[-1].find("source/address")
    assert (mc.get("bus"), mc.get("slot"), mc.get("function")) == ("0x03", "0x00", "0x1")


def test_kvm_gets_host_cpu_and_direct_boot() -> None:
    xml = build_domain_xml(
        spec(domain_type="kvm", disk_image=None, kernel="/k", initrd="/i", cmdline="console=ttyS0"), template_text()
    )
    root = ET.fromstring(xml)
    assert root.find("cpu").get("mode") == "host-passthrough"
    assert root.findtext("os/kernel") == "/k" and root.findtext("os/initrd") == "/i"
    assert root.find("devices/disk") is None


def test_unix_channel_for_the_fm_api() -> None:
    root = ET.fromstring(build_domain_xml(spec(fm_channel="unix", fm_channel_socket="/run/fm.sock"), template_text()))
    ch = root.find("devices/channel")
    assert ch.get("type") == "unix" and ch.find("source").get("path") == "/run/fm.sock"
    assert ch.find("target").get("name") == CHANNEL_NAME
    assert root.find("devices/interface") is None


def test_hash_changes_with_the_spec() -> None:
    a = build_domain_xml(spec(), template_text())
    b = build_domain_xml(spec(vcpus=4), template_text())
    assert spec_hash(a) and spec_hash(a) != spec_hash(b)
    assert spec_hash(a) == spec_hash(build_domain_xml(spec(), template_text()))


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"domain_type": "xen"}, "domain_type"),
        ({"vcpus": 0}, "vcpus"),
        ({"memory_mib": 8}, "memory_mib"),
        ({"hostdevs": ("zz",)}, "hostdevs"),
        ({"hostdevs": (ALL[0], ALL[0])}, "hostdevs"),
        ({"disk_image": None}, "disk_image"),
        ({"kernel": "/k"}, "kernel/initrd"),
        ({"fm_channel": "unix"}, "fm_channel_socket"),
        ({"name": "a b"}, "name"),
    ],
    ids=["type", "vcpus", "memory", "bad-bdf", "dup-bdf", "no-boot", "kernel-alone", "unix-no-socket", "name"],
)
def test_bad_spec_names_the_field(kw: dict, field: str) -> None:
    with pytest.raises(DomainXMLError, match=field):
        build_domain_xml(spec(**kw), template_text())


def test_bad_template() -> None:
    with pytest.raises(DomainXMLError, match="expected <domain>"):
        build_domain_xml(spec(), "<network/>")


@pytest.mark.parametrize("variant", ["dgx", "supermicro"])
def test_defined_and_started_on_the_test_driver(tmp_path: Path, test_conn, variant: str) -> None:
    board = build_hgx_h100(tmp_path / "n", variant=variant)
    settings = FabricSettings(
        sysfs_root=board.sysfs,
        domain_type="test",
        domain_name=f"fab-{variant}",
        libvirt_uri="test:///default",
        fm_channel="unix",
        disk_image=tmp_path / "d.qcow2",
        fm_channel_socket=tmp_path / "fm.sock",
    )
    devs = passthrough_devices(settings)
    assert devs == ALL
    vm = ServiceVM("test:///default", domain_spec(settings, devs), template_text())
    try:
        vm.start()
        dom = test_conn.lookupByName(f"fab-{variant}")
        assert dom.isActive()
        live = dom.XMLDesc()
        assert hostdev_addresses(live) == list(ALL)  # the memory controller included
        assert ET.fromstring(live).find("devices/channel/source").get("path") == str(tmp_path / "fm.sock")
        groups = discover_fabric_devices(board.sysfs).iommu_groups
        assert len(groups) == (1 if variant == "supermicro" else 5)
    finally:
        vm.undefine()
        vm.close()


def test_existing_domain_is_reused_not_duplicated(test_conn) -> None:
    s = spec(name="fab-reuse", domain_type="test")
    first = ServiceVM("test:///default", s, template_text())
    second = ServiceVM("test:///default", s, template_text())
    try:
        first.start()
        uuid = test_conn.lookupByName("fab-reuse").UUIDString()
        dom_id = first.domain_id()
        second.start()  # same name, same definition: reused as is, still the same running VM
        assert second.reused is True
        assert test_conn.lookupByName("fab-reuse").UUIDString() == uuid
        assert second.domain_id() == dom_id
        assert [d.name() for d in test_conn.listAllDomains()].count("fab-reuse") == 1
        # A changed spec redefines the same domain (same UUID), not a second one.
        third = ServiceVM("test:///default", spec(name="fab-reuse", domain_type="test", vcpus=3), template_text())
        third.ensure_defined()
        assert test_conn.lookupByName("fab-reuse").UUIDString() == uuid
        assert spec_hash(test_conn.lookupByName("fab-reuse").XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == spec_hash(
            third.xml
        )
        third.close()
    finally:
        first.undefine()
        first.close()
        second.close()


def test_crash_is_restarted_with_backoff(test_conn) -> None:
    calls: list[int] = []
    vm = ServiceVM(
        "test:///default",
        spec(name="fab-crash", domain_type="test"),
        template_text(),
        backoff=BackoffPolicy(initial_s=0.01, max_s=0.04),
        on_restarted=lambda: calls.append(1),
    )
    try:
        vm.start()
        assert vm.check_once() is False  # running, nothing to do
        for n in (1, 2, 3, 4):
            test_conn.lookupByName("fab-crash").destroy()  # the VM dies unasked
            assert vm.check_once() is True
            assert test_conn.lookupByName("fab-crash").isActive()
            assert vm.restarts == n
        assert calls == [1, 1, 1, 1]
        assert [vm.backoff.delay(i) for i in (1, 2, 3, 4)] == [0.01, 0.02, 0.04, 0.04]
        vm.stop(timeout_s=1)  # a clean stop is not a crash
        assert not test_conn.lookupByName("fab-crash").isActive()
        assert vm.check_once() is False and vm.state()["state"] == "shutoff"
    finally:
        vm.undefine()
        vm.close()


def test_undefined_domain_is_redefined(test_conn) -> None:
    vm = ServiceVM(
        "test:///default",
        spec(name="fab-gone", domain_type="test"),
        template_text(),
        backoff=BackoffPolicy(initial_s=0.01),
    )
    try:
        vm.start()
        dom = test_conn.lookupByName("fab-gone")
        dom.destroy()
        dom.undefine()
        assert vm.check_once() is True
        assert test_conn.lookupByName("fab-gone").isActive()
    finally:
        vm.undefine()
        vm.close()


@pytest.mark.parametrize(("restart", "entry"), [(False, "gpucaas.fm-restart=0"), (True, "gpucaas.fm-restart=1")])
def test_fm_restart_mode_is_an_smbios_oem_string(restart: bool, entry: str) -> None:
    root = ET.fromstring(build_domain_xml(spec(fm_restart=restart), template_text()))
    assert root.find("os/smbios").get("mode") == "sysinfo"
    assert [e.text for e in root.findall("sysinfo/oemStrings/entry")] == [entry]


def test_lifecycle_event_wakes_the_watcher(test_conn) -> None:
    """With a poll interval far beyond the wait, only the 'stopped' event can trigger the restart."""
    import threading

    restarted = threading.Event()
    vm = ServiceVM(
        "test:///default",
        spec(name="fab-events", domain_type="test"),
        template_text(),
        watch_interval_s=3600,
        backoff=BackoffPolicy(initial_s=0.01),
        on_restarted=restarted.set,
    )
    try:
        vm.start()
        vm.start_watch()
        test_conn.lookupByName("fab-events").destroy()
        assert restarted.wait(60), "the lifecycle event did not wake the watcher"
        assert test_conn.lookupByName("fab-events").isActive()
        assert vm.restarts == 1
    finally:
        vm.stop_watch()
        vm.undefine()
        vm.close()
