"""The CDI spec of the node's vfio GPUs: build (pure), check, and write atomically.

One CDI device per GPU, named by its PCI address, with the device node(s) a Kata
VM needs: ``/dev/vfio/<group>`` (legacy vfio, plus the container node
``/dev/vfio/vfio`` at spec level) or, with iommufd, ``/dev/vfio/devices/vfioN``
and ``/dev/iommu``.

``cdiVersion`` is 0.7.0, not the newest (0.8.0 / 1.0.0): CDI readers refuse a spec
whose version is newer than the one they know, the containerd 1.7 / CRI-O 1.30
generation vendors CDI 0.7, and this spec uses nothing newer than 0.5.0 features
(deviceNodes with hostPath/permissions, device annotations). 0.7.0 is the
newest version every runtime Kata nodes run today accepts.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core.vfio_devices import GPU

logger = logging.getLogger(__name__)


class CDISpecError(ValueError):
    """The CDI spec built for the devices breaks a CDI rule; nothing was written."""


CDI_VERSION = "0.7.0"
_VENDOR_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$")
_CLASS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_ANNOTATION_KEY_RE = re.compile(r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def qualified_name(kind: str, name: str) -> str:
    """``nvidia.com/gpu`` + ``0000:18:00.0`` -> ``nvidia.com/gpu=0000:18:00.0``."""
    return f"{kind}={name}"


def spec_filename(kind: str) -> str:
    """``nvidia.com/gpu`` -> ``gpucaas-nvidia.com-gpu.json`` (one file per kind we own)."""
    return "gpucaas-" + kind.replace("/", "-") + ".json"


def _node(container_path: str, dev_root: Path) -> dict[str, Any]:
    node: dict[str, Any] = {"path": container_path, "permissions": "rw"}
    if dev_root != Path("/dev"):
        node["hostPath"] = str(dev_root / Path(container_path).relative_to("/dev"))
    return node


def build_cdi_spec(gpus: Iterable[GPU], *, kind: str, dev_root: Path = Path("/dev")) -> dict[str, Any]:
    """The CDI spec (wire dict) for these GPUs, devices sorted by PCI address."""
    gpus = sorted(gpus, key=lambda g: g.bdf)
    devices = []
    for g in gpus:
        devices.append(
            {
                "name": g.bdf,
                "annotations": {
                    "gpucaas.dev/model": g.model,
                    "gpucaas.dev/iommu-group": str(g.iommu_group),
                    "gpucaas.dev/numa-node": "" if g.numa_node is None else str(g.numa_node),
                },
                "containerEdits": {"deviceNodes": [_node(p, dev_root) for p in g.device_nodes()]},
            }
        )
    spec: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": kind, "devices": devices}
    if any(not (g.iommufd and g.vfio_device) for g in gpus):
        spec["containerEdits"] = {"deviceNodes": [_node("/dev/vfio/vfio", dev_root)]}
    return spec


def check_cdi_spec(spec: Mapping[str, Any]) -> list[str]:
    """Violations of the CDI spec's rules (SPEC.md + schema.json), as readable messages."""
    errors: list[str] = []
    if not isinstance(spec.get("cdiVersion"), str) or not re.match(r"^\d+\.\d+\.\d+$", spec["cdiVersion"]):
        errors.append(f"cdiVersion must be a semver string, got {spec.get('cdiVersion')!r}")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind.count("/") != 1:
        errors.append(f"kind must be 'vendor/class', got {kind!r}")
    else:
        vendor, cls = kind.split("/")
        if not _VENDOR_RE.match(vendor):
            errors.append(f"kind vendor {vendor!r} must be a domain name (e.g. nvidia.com)")
        if not _CLASS_RE.match(cls):
            errors.append(f"kind class {cls!r} may hold only letters, digits, '_', '-', '.'")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        errors.append("devices must be a non-empty list")
        devices = []
    seen: set[str] = set()
    for i, dev in enumerate(devices):
        name = dev.get("name") if isinstance(dev, dict) else None
        where = f"devices[{i}]"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            errors.append(
                f"{where}.name {name!r} must be letters, digits, '_', '-', '.', ':' "
                "starting and ending with a letter or digit"
            )
        elif name in seen:
            errors.append(f"{where}.name {name!r} is duplicated")
        else:
            seen.add(name)
        edits = dev.get("containerEdits") if isinstance(dev, dict) else None
        if not isinstance(edits, dict) or not edits:
            errors.append(f"{where}.containerEdits must be a non-empty object")
        else:
            errors.extend(_check_edits(edits, f"{where}.containerEdits"))
        for key in (dev.get("annotations") or {}) if isinstance(dev, dict) else {}:
            if not _ANNOTATION_KEY_RE.match(key):
                errors.append(f"{where}.annotations key {key!r} is not a valid annotation key")
    if "containerEdits" in spec:
        errors.extend(_check_edits(spec["containerEdits"], "containerEdits"))
    return errors


def _check_edits(edits: Mapping[str, Any], where: str) -> list[str]:
    errors = []
    for j, node in enumerate(edits.get("deviceNodes") or []):
        path = node.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            errors.append(f"{where}.deviceNodes[{j}].path must be an absolute path, got {path!r}")
        host = node.get("hostPath")
        if host is not None and (not isinstance(host, str) or not host.startswith("/")):
            errors.append(f"{where}.deviceNodes[{j}].hostPath must be an absolute path, got {host!r}")
        perms = node.get("permissions")
        if perms is not None and (not perms or set(perms) - set("rwm")):
            errors.append(f"{where}.deviceNodes[{j}].permissions must be made of r, w, m; got {perms!r}")
        if node.get("type") not in (None, "b", "c", "u", "p"):
            errors.append(f"{where}.deviceNodes[{j}].type must be b, c, u or p")
    return errors


class SpecWriter:
    """Keeps ``<cdi_dir>/<spec file>`` equal to the spec of the current GPUs."""

    def __init__(self, cdi_dir: Path, kind: str, dev_root: Path) -> None:
        self.path = Path(cdi_dir) / spec_filename(kind)
        self.kind = kind
        self.dev_root = dev_root
        self._last: str | None = None

    def update(self, gpus: Iterable[GPU]) -> bool:
        """Rewrite the spec if it changed (removed when no GPU is left). True if written."""
        gpus = list(gpus)
        if not gpus:
            if self.path.exists():
                self.path.unlink()
                logger.warning("no vfio GPU left: removed CDI spec %s", self.path)
                self._last = None
                return True
            return False
        spec = build_cdi_spec(gpus, kind=self.kind, dev_root=self.dev_root)
        problems = check_cdi_spec(spec)
        if problems:
            raise CDISpecError("; ".join(problems))
        text = json.dumps(spec, indent=2, sort_keys=False) + "\n"
        if text == self._last and self.path.exists():
            return False
        write_atomically(self.path, text)
        self._last = text
        logger.info("wrote CDI spec %s: %d device(s) of kind %s", self.path, len(gpus), self.kind)
        return True

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def write_atomically(path: Path, text: str) -> None:
    """Write a temp file in the same directory, fsync, rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
