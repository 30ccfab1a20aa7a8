"""Pure builder of the service VM's libvirt domain XML.

``build_domain_xml(spec, template)`` takes the template (``vm_images/domain/service-vm.xml``)
and a :class:`DomainSpec` and returns the XML text: domain type, name, vCPUs,
memory, boot source, Fabric Manager channel and one managed PCI ``<hostdev>``
per NVSwitch and for the NVSwitch memory controller. ``managed='yes'`` makes
libvirt detach the devices from their host driver and bind them to vfio-pci
when the domain starts (and give them back when it stops).

A ``<metadata>`` element carries the node name and a hash of the spec, so the
libvirt adapter can tell whether an existing domain of the same name is ours and
still matches (reuse it) or needs redefining.
"""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass

from services.fabric.discovery import normalize_bdf
from services.fabric.errors import DomainXMLError

METADATA_NS = "https://gpucaas.dev/xmlns/fabric-vm/v1"
CHANNEL_NAME = "dev.gpucaas.fabricmanager"
#: SMBIOS OEM string the service VM image reads (dmidecode -t 11) to choose FABRIC_MODE_RESTART.
FM_RESTART_OEM_STRING = "gpucaas.fm-restart="
DOMAIN_TYPES = ("kvm", "qemu", "test")
FM_CHANNELS = ("network", "unix", "none")


@dataclass(frozen=True)
class DomainSpec:
    """Typed inputs of the domain XML."""

    name: str
    domain_type: str = "kvm"
    vcpus: int = 2
    memory_mib: int = 4096
    hostdevs: tuple[str, ...] = ()  # PCI addresses: NVSwitches then the memory controller
    disk_image: str | None = None
    kernel: str | None = None
    initrd: str | None = None
    cmdline: str = "console=ttyS0"
    fm_channel: str = "network"
    fm_network: str = "gpucaas-fabric"
    fm_channel_socket: str | None = None
    node: str = ""
    serial_log: str | None = None  # write the serial console to this file (tests); else a pty
    fm_restart: bool = False  # boot Fabric Manager in resiliency/restart mode (not the node's first boot)

    def validate(self) -> None:
        if not self.name or any(c in self.name for c in "/ \t\n"):
            raise DomainXMLError(f"name: {self.name!r} must be non-empty without '/' or spaces")
        if self.domain_type not in DOMAIN_TYPES:
            raise DomainXMLError(f"domain_type: {self.domain_type!r} not one of {DOMAIN_TYPES}")
        if self.vcpus < 1:
            raise DomainXMLError(f"vcpus: must be >= 1, got {self.vcpus}")
        if self.memory_mib < 64:
            raise DomainXMLError(f"memory_mib: must be >= 64, got {self.memory_mib}")
        if self.fm_channel not in FM_CHANNELS:
            raise DomainXMLError(f"fm_channel: {self.fm_channel!r} not one of {FM_CHANNELS}")
        if self.fm_channel == "unix" and not self.fm_channel_socket:
            raise DomainXMLError("fm_channel_socket: required when fm_channel is 'unix'")
        if (self.kernel is None) != (self.initrd is None):
            raise DomainXMLError("kernel/initrd: give both (direct boot) or neither")
        if self.kernel is None and self.disk_image is None:
            raise DomainXMLError("disk_image: required unless kernel and initrd are given")
        for bdf in self.hostdevs:
            try:
                normalize_bdf(bdf, field="hostdevs")
            except ValueError as exc:
                raise DomainXMLError(str(exc)) from None
        if len(set(self.hostdevs)) != len(self.hostdevs):
            raise DomainXMLError(f"hostdevs: duplicate PCI addresses in {list(self.hostdevs)}")

    def config_hash(self) -> str:
        data = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        return hashlib.sha256(data).hexdigest()[:16]


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, {k.rstrip("_"): v for k, v in attrs.items()})
    if text is not None:
        el.text = text
    return el


def _hostdev(devices: ET.Element, bdf: str) -> None:
    bdf = normalize_bdf(bdf)
    hd = _sub(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
    src = _sub(hd, "source")
    _sub(src, "address", domain=f"0x{bdf[0:4]}", bus=f"0x{bdf[5:7]}", slot=f"0x{bdf[8:10]}", function=f"0x{bdf[11]}")


def build_domain_xml(spec: DomainSpec, template: str) -> str:
    """The domain XML for ``spec``, built on ``template`` (its devices and features kept)."""
    spec.validate()
    try:
        root = ET.fromstring(template)
    except ET.ParseError as exc:
        raise DomainXMLError(f"domain template is not XML: {exc}") from exc
    if root.tag != "domain":
        raise DomainXMLError(f"domain template root is <{root.tag}>, expected <domain>")

    root.set("type", spec.domain_type)
    for tag in ("uuid", "name", "memory", "currentMemory", "vcpu"):
        for old in root.findall(tag):
            root.remove(old)
    name = ET.Element("name")
    name.text = spec.name
    mem = ET.Element("memory", unit="MiB")
    mem.text = str(spec.memory_mib)
    vcpu = ET.Element("vcpu", placement="static")
    vcpu.text = str(spec.vcpus)
    at = 1 if root.find("title") is not None else 0
    root.insert(0, name)
    for i, el in enumerate((mem, vcpu), start=1 + at):
        root.insert(i, el)

    # Metadata: ownership and the spec hash (reuse vs redefine).
    metadata = root.find("metadata")
    if metadata is None:
        metadata = _sub(root, "metadata")
    for old in list(metadata):
        if old.tag.startswith(f"{{{METADATA_NS}}}"):
            metadata.remove(old)
    ET.register_namespace("gpucaas", METADATA_NS)
    meta = ET.SubElement(metadata, f"{{{METADATA_NS}}}service-vm")
    meta.set("node", spec.node)
    meta.set("hash", spec.config_hash())

    # CPU model: the host's under KVM; software emulation (TCG) takes QEMU's default.
    for old in root.findall("cpu"):
        root.remove(old)
    if spec.domain_type == "kvm":
        _sub(root, "cpu", mode="host-passthrough", check="none")

    os_el = root.find("os")
    if os_el is None:
        os_el = _sub(root, "os")
        _sub(os_el, "type", "hvm", arch="x86_64", machine="q35")
    for tag in ("kernel", "initrd", "cmdline", "boot", "smbios"):
        for old in os_el.findall(tag):
            os_el.remove(old)
    # Tell the image whether Fabric Manager starts fresh (first boot since the host booted)
    # or in restart mode (the VM restarted while partitions may be active): SMBIOS type 11.
    _sub(os_el, "smbios", mode="sysinfo")
    for old in root.findall("sysinfo"):
        root.remove(old)
    sysinfo = ET.Element("sysinfo", type="smbios")
    oem = _sub(sysinfo, "oemStrings")
    _sub(oem, "entry", f"{FM_RESTART_OEM_STRING}{int(spec.fm_restart)}")
    root.insert(list(root).index(os_el), sysinfo)
    if spec.kernel:
        _sub(os_el, "kernel", spec.kernel)
        _sub(os_el, "initrd", spec.initrd)
        _sub(os_el, "cmdline", spec.cmdline)
    else:
        _sub(os_el, "boot", dev="hd")

    devices = root.find("devices")
    if devices is None:
        devices = _sub(root, "devices")
    for tag in ("disk", "hostdev", "interface", "channel"):
        for old in devices.findall(tag):
            devices.remove(old)
    if spec.serial_log:
        for tag in ("serial", "console"):
            for old in devices.findall(tag):
                devices.remove(old)
        serial = _sub(devices, "serial", type="file")
        _sub(serial, "source", path=spec.serial_log, append="on")
        _sub(serial, "target", port="0")
    if spec.disk_image:
        disk = _sub(devices, "disk", type="file", device="disk")
        fmt = "qcow2" if spec.disk_image.endswith(".qcow2") else "raw"
        _sub(disk, "driver", name="qemu", type=fmt, cache="none" if spec.domain_type == "kvm" else "unsafe")
        _sub(disk, "source", file=spec.disk_image)
        _sub(disk, "target", dev="vda", bus="virtio")
    if spec.fm_channel == "network":
        iface = _sub(devices, "interface", type="network")
        _sub(iface, "source", network=spec.fm_network)
        _sub(iface, "model", type="virtio")
    elif spec.fm_channel == "unix":
        ch = _sub(devices, "channel", type="unix")
        _sub(ch, "source", mode="bind", path=str(spec.fm_channel_socket))
        _sub(ch, "target", type="virtio", name=CHANNEL_NAME)
    for bdf in spec.hostdevs:
        _hostdev(devices, bdf)

    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode")


def hostdev_addresses(xml: str) -> list[str]:
    """The PCI addresses of a domain XML's ``<hostdev type='pci'>`` elements, in order."""
    root = ET.fromstring(xml)
    out = []
    for hd in root.iter("hostdev"):
        if hd.get("type") != "pci":
            continue
        a = hd.find("source/address")
        if a is None:
            continue
        out.append(
            f"{int(a.get('domain', '0'), 16):04x}:{int(a.get('bus', ''), 16):02x}:"
            f"{int(a.get('slot', ''), 16):02x}.{int(a.get('function', ''), 16):x}"
        )
    return out


def spec_hash(xml: str) -> str | None:
    """The spec hash stored in a domain's metadata, or None when the domain is not ours."""
    root = ET.fromstring(xml)
    meta = root.find(f"metadata/{{{METADATA_NS}}}service-vm")
    return None if meta is None else meta.get("hash")


def network_xml(name: str, host_ip: str = "10.254.254.1", netmask: str = "255.255.255.252") -> str:
    """An isolated libvirt network (no <forward>: the VM reaches the host only).

    A /30: the host side is ``host_ip`` (.1), the service VM is statically .2 (see
    vm_images/service-vm/), where Fabric Manager binds its API.
    """
    net = ET.Element("network")
    _sub(net, "name", name)
    _sub(net, "ip", address=host_ip, netmask=netmask)
    ET.indent(net, space="  ")
    return ET.tostring(net, encoding="unicode")
