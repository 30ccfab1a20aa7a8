"""PCI bus id forms: Fabric Manager and NVML write ``00000000:18:00.0``, sysfs ``0000:18:00.0``."""

from __future__ import annotations

import re

_BDF = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


def parse_pci_bus_id(text: str) -> tuple[int, int, int, int]:
    """(domain, bus, device, function) of a PCI bus id in any usual form."""
    m = _BDF.match(text.strip())
    if not m:
        raise ValueError(f"pci_bus_id: {text!r} is not a PCI address like 0000:18:00.0 or 00000000:18:00.0")
    domain = int(m["domain"] or "0", 16)
    bus, device, function = int(m["bus"], 16), int(m["device"], 16), int(m["function"])
    if device > 0x1F:
        raise ValueError(f"pci_bus_id: device {device:#x} in {text!r} is above 0x1f")
    return domain, bus, device, function


def format_pci_bus_id(domain: int, bus: int, device: int, function: int) -> str:
    """The sysfs form, ``0000:18:00.0`` (lower case, 4-digit domain where it fits)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def normalize_pci_bus_id(text: str) -> str:
    return format_pci_bus_id(*parse_pci_bus_id(text))
