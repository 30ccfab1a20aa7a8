"""HGX H100 platform layouts: which PCI address holds which Fabric Manager physical id.

On H100, Fabric Manager's partition info carries no PCI bus id or UUID: GPUs are
known by physical id, which is the GPU's module id on the baseboard (NVIDIA Fabric
Manager User Guide, "Shared NVSwitch Virtualization Model" -> "GPU Partitions" /
"Partition Information" for DGX H100 and HGX H100: "GPU UUID and PCI bus id are
empty; physical id is the GPU module id"). The host must therefore map module
id -> PCI address itself. This module is that one mapping, used by the fabric
service (which serves it on its topology endpoint and in FabricState, where the
device plugin and the scheduler extender read it), ``gpucaas doctor`` and
``caasctl nodes``.

Where a layout comes from, in order: a file (JSON or YAML, e.g. a ConfigMap
mounted into the fabric pod; :func:`load_layout`), else a shipped layout by name
(:data:`PLATFORMS`). :func:`cross_check_sysfs` checks it against the host's sysfs
(each GPU address is an NVIDIA 3D controller, NUMA node as described);
:func:`validate_against_table` checks it against Fabric Manager's partition
table (every physical id FM names is mapped, 8 GPUs, nothing extra).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NVIDIA_VENDOR = "0x10de"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")


class LayoutError(ValueError):
    """A layout that is malformed or does not match the host / Fabric Manager."""


@dataclass(frozen=True)
class PlatformLayout:
    """One baseboard's PCI layout: GPUs with their physical (module) ids, NVSwitches.

    ``gpu_numa_nodes`` (optional, same order as ``gpu_bdfs``) is what sysfs should
    report for each GPU; ``verified`` says whether the layout was checked on real
    hardware (the hardware runbook's mapping step).
    """

    name: str
    gpu_bdfs: tuple[str, ...]
    gpu_physical_ids: tuple[int, ...]
    nvswitch_bdfs: tuple[str, ...]
    memory_controller_bdf: str | None = None
    gpu_numa_nodes: tuple[int, ...] | None = None
    verified: bool = False
    source: str = "shipped"
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if len(self.gpu_bdfs) != len(self.gpu_physical_ids):
            raise LayoutError(
                f"layout {self.name}: {len(self.gpu_bdfs)} GPU addresses but {len(self.gpu_physical_ids)} physical ids"
            )
        for bdf in (*self.gpu_bdfs, *self.nvswitch_bdfs):
            if not _BDF.match(bdf):
                raise LayoutError(f"layout {self.name}: {bdf!r} is not a PCI address like 0000:18:00.0")
        if len(set(self.gpu_bdfs)) != len(self.gpu_bdfs):
            raise LayoutError(f"layout {self.name}: a GPU PCI address appears twice")
        if len(set(self.gpu_physical_ids)) != len(self.gpu_physical_ids):
            raise LayoutError(f"layout {self.name}: a physical id appears twice")
        if any(p < 1 for p in self.gpu_physical_ids):
            raise LayoutError(f"layout {self.name}: physical ids (module ids) start at 1")
        if self.gpu_numa_nodes is not None and len(self.gpu_numa_nodes) != len(self.gpu_bdfs):
            raise LayoutError(f"layout {self.name}: gpu_numa_nodes needs one entry per GPU")

    def physical_id_to_bdf(self) -> dict[int, str]:
        return dict(zip(self.gpu_physical_ids, self.gpu_bdfs, strict=True))

    def bdf_to_physical_id(self) -> dict[str, int]:
        return dict(zip(self.gpu_bdfs, self.gpu_physical_ids, strict=True))

    def view(self, sysfs_root: str | Path | None = None) -> dict[str, Any]:
        """JSON form (topology endpoint, doctor, caasctl); with ``sysfs_root`` each GPU also
        carries what sysfs says about it (NUMA node, slot, upstream bridge)."""
        numa = self.gpu_numa_nodes or (None,) * len(self.gpu_bdfs)
        gpus = []
        for p, b, n in sorted(zip(self.gpu_physical_ids, self.gpu_bdfs, numa, strict=True)):
            row: dict[str, Any] = {"physical_id": p, "pci_bus_id": b, "numa_node": n}
            if sysfs_root is not None:
                row["sysfs"] = sysfs_gpu_facts(sysfs_root, b)
            gpus.append(row)
        return {
            "name": self.name,
            "source": self.source,
            "verified": self.verified,
            "gpus": gpus,
            "nvswitches": list(self.nvswitch_bdfs),
            "memory_controller": self.memory_controller_bdf,
        }


#: DGX H100: GPUs on buses 18/2a/3a/5d (NUMA 0) and 9a/ab/ba/db (NUMA 1); module ids
#: do not follow bus order. Four NVSwitches and the NVSwitch memory controller.
DGX_H100 = PlatformLayout(
    name="dgx-h100",
    gpu_bdfs=(
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
        "0000:ba:00.0",
        "0000:db:00.0",
    ),
    gpu_physical_ids=(2, 4, 1, 3, 7, 5, 8, 6),
    nvswitch_bdfs=("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"),
    memory_controller_bdf="0000:03:00.1",
    gpu_numa_nodes=(0, 0, 0, 0, 1, 1, 1, 1),
)

#: Supermicro HGX H100 8-GPU (SYS-821GE-TNHR class): GPUs on buses 19/3b/4c/5d (NUMA 0)
#: and 9b/bb/cb/db (NUMA 1). Module ids here are in bus order, which is NOT confirmed
#: on hardware (``verified=False``): the hardware runbook's mapping step checks it
#: (nvidia-smi -q "Module Id" per bus id in a bare-metal boot) and a layout file
#: overrides it where it differs.
SUPERMICRO_HGX_H100 = PlatformLayout(
    name="supermicro-hgx-h100",
    gpu_bdfs=(
        "0000:19:00.0",
        "0000:3b:00.0",
        "0000:4c:00.0",
        "0000:5d:00.0",
        "0000:9b:00.0",
        "0000:bb:00.0",
        "0000:cb:00.0",
        "0000:db:00.0",
    ),
    gpu_physical_ids=(1, 2, 3, 4, 5, 6, 7, 8),
    nvswitch_bdfs=("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"),
    memory_controller_bdf=None,
    gpu_numa_nodes=(0, 0, 0, 0, 1, 1, 1, 1),
    notes="module ids in bus order: unverified, see docs/hardware-runbook.md",
)

PLATFORMS: dict[str, PlatformLayout] = {p.name: p for p in (DGX_H100, SUPERMICRO_HGX_H100)}


def layout_from_mapping(data: Mapping[str, Any], *, source: str) -> PlatformLayout:
    """A layout from its JSON/YAML form.

    Either ``{"name", "gpus": [{"physical_id", "pci_bus_id", "numa_node"?}], "nvswitches"?,
    "memory_controller"?, "verified"?}`` or the fake board's ``board.json``
    (``devices`` with ``kind``/``bdf``/``physical_id``/``numa_node``).
    """
    if not isinstance(data, Mapping):
        raise LayoutError(f"layout {source}: expected a mapping with 'gpus'")
    gpus: Any  # a list of mappings: checked below
    if "devices" in data:  # a fake board's board.json
        gpus = [
            {"physical_id": d.get("physical_id"), "pci_bus_id": d.get("bdf"), "numa_node": d.get("numa_node")}
            for d in data["devices"]
            if d.get("kind") == "gpu"
        ]
        switches = [d["bdf"] for d in data["devices"] if d.get("kind") == "nvswitch"]
        mc = next((d["bdf"] for d in data["devices"] if d.get("kind") == "memory-controller"), None)
        name = f"board-{data.get('variant', 'fake')}"
    else:
        gpus = data.get("gpus")
        switches = list(data.get("nvswitches") or [])
        mc = data.get("memory_controller")
        name = str(data.get("name") or "custom")
    if not isinstance(gpus, list) or not gpus:
        raise LayoutError(f"layout {source}: 'gpus' must list each GPU with physical_id and pci_bus_id")
    rows = []
    for i, g in enumerate(gpus):
        try:
            rows.append(
                (
                    int(g["physical_id"]),
                    normalize(str(g["pci_bus_id"])),
                    None if g.get("numa_node") is None else int(g["numa_node"]),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LayoutError(
                f"layout {source}: gpus[{i}] needs an integer physical_id and a PCI pci_bus_id ({exc})"
            ) from None
    numa = tuple(r[2] for r in rows)
    return PlatformLayout(
        name=name,
        gpu_bdfs=tuple(r[1] for r in rows),
        gpu_physical_ids=tuple(r[0] for r in rows),
        nvswitch_bdfs=tuple(normalize(s) for s in switches),
        memory_controller_bdf=mc and normalize(mc),
        gpu_numa_nodes=None if any(n is None for n in numa) else numa,  # type: ignore[arg-type]
        verified=bool(data.get("verified", False)),
        source=source,
    )


def load_layout(spec: str | Path) -> PlatformLayout:
    """A shipped layout by name, or one read from a file (JSON or YAML; a ConfigMap key
    mounted as a file), or a directory holding ``board.json`` (the fake board)."""
    text = str(spec)
    if text in PLATFORMS:
        return PLATFORMS[text]
    path = Path(text)
    if path.is_dir():
        path = path / "board.json"
    if not path.exists():
        raise LayoutError(
            f"platform: {text!r} is neither a shipped layout ({sorted(PLATFORMS)}) nor an existing layout file"
        )
    raw = path.read_text()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        import yaml

        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise LayoutError(f"platform: {path} is neither JSON nor YAML: {exc}") from None
    return layout_from_mapping(data, source=str(path))


def normalize(bdf: str) -> str:
    """``00000000:18:00.0`` / ``18:00.0`` / upper case -> ``0000:18:00.0``."""
    m = re.match(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$", bdf.strip())
    if not m:
        raise LayoutError(f"pci_bus_id: {bdf!r} is not a PCI address like 0000:18:00.0")
    return f"{int(m[1] or '0', 16):04x}:{int(m[2], 16):02x}:{int(m[3], 16):02x}.{m[4]}"


def cross_check_sysfs(layout: PlatformLayout, sysfs_root: str | Path) -> list[str]:
    """Problems found comparing the layout with ``<sysfs_root>/bus/pci/devices`` (empty: agrees).

    Checks each GPU address exists, is an NVIDIA 3D controller (class 0x0302xx), sits
    on the NUMA node the layout names; each NVSwitch address exists and is NVIDIA;
    and no NVIDIA 3D controller on the host is missing from the layout.
    """
    devices = Path(sysfs_root) / "bus" / "pci" / "devices"
    problems: list[str] = []

    def read(bdf: str, name: str) -> str | None:
        try:
            return (devices / bdf / name).read_text().strip()
        except OSError:
            return None

    numa = layout.gpu_numa_nodes or (None,) * len(layout.gpu_bdfs)
    for pid, bdf, node in zip(layout.gpu_physical_ids, layout.gpu_bdfs, numa, strict=True):
        if not (devices / bdf).exists():
            problems.append(f"GPU {pid}: {bdf} not in sysfs")
            continue
        if read(bdf, "vendor") != NVIDIA_VENDOR or not (read(bdf, "class") or "").startswith("0x0302"):
            problems.append(
                f"GPU {pid}: {bdf} is not an NVIDIA 3D controller "
                f"(vendor {read(bdf, 'vendor')}, class {read(bdf, 'class')})"
            )
        got = read(bdf, "numa_node")
        if node is not None and got is not None and got != "-1" and int(got) != node:
            problems.append(f"GPU {pid}: {bdf} is on NUMA node {got}, the layout says {node}")
    for bdf in layout.nvswitch_bdfs:
        if not (devices / bdf).exists():
            problems.append(f"NVSwitch {bdf} not in sysfs")
        elif read(bdf, "vendor") != NVIDIA_VENDOR:
            problems.append(f"NVSwitch {bdf} is not an NVIDIA device (vendor {read(bdf, 'vendor')})")
    if devices.is_dir():
        known = set(layout.gpu_bdfs)
        for d in sorted(devices.iterdir()):
            if (
                d.name not in known
                and read(d.name, "vendor") == NVIDIA_VENDOR
                and (read(d.name, "class") or "").startswith("0x0302")
            ):
                problems.append(f"NVIDIA GPU {d.name} in sysfs is not in layout {layout.name}")
    return problems


def sysfs_gpu_facts(sysfs_root: str | Path, bdf: str) -> dict[str, Any]:
    """What sysfs says about one GPU address: NUMA node, the physical slot whose address
    matches (``/sys/bus/pci/slots/*/address`` = domain:bus:device), and the upstream
    bridge (the parent of the device's real directory). Missing pieces are None; shown
    beside the layout so an operator can match module ids to slots and bridges."""
    root = Path(sysfs_root)
    dev = root / "bus" / "pci" / "devices" / bdf
    facts: dict[str, Any] = {"present": dev.exists(), "numa_node": None, "slot": None, "upstream_bridge": None}
    if not dev.exists():
        return facts
    try:
        numa = int((dev / "numa_node").read_text().strip())
        facts["numa_node"] = None if numa < 0 else numa
    except (OSError, ValueError):
        pass
    slots = root / "bus" / "pci" / "slots"
    if slots.is_dir():
        for slot in sorted(slots.iterdir()):
            try:
                if (slot / "address").read_text().strip() == bdf.rsplit(".", 1)[0]:  # dddd:bb:dd
                    facts["slot"] = slot.name
            except OSError:
                continue
    parent = dev.resolve().parent.name
    if _BDF.match(parent):
        facts["upstream_bridge"] = parent
    return facts


def validate_against_table(
    layout: PlatformLayout, table: Iterable[Iterable[int]], *, expected_gpus: int = 8
) -> list[str]:
    """Problems comparing the layout with Fabric Manager's partition table (the physical
    ids of each partition); empty when every id FM uses is mapped and the counts agree."""
    used: set[int] = set()
    for ids in table:
        used |= {int(i) for i in ids}
    mapped = set(layout.gpu_physical_ids)
    problems = []
    if used - mapped:
        problems.append(
            f"Fabric Manager's partitions use physical id(s) {sorted(used - mapped)} "
            f"that layout {layout.name} does not map"
        )
    if used and mapped - used:
        problems.append(
            f"layout {layout.name} maps physical id(s) {sorted(mapped - used)} that no Fabric Manager partition uses"
        )
    if len(mapped) != expected_gpus:
        problems.append(f"layout {layout.name} has {len(mapped)} GPUs, expected {expected_gpus}")
    return problems
