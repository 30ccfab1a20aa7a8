"""Tenant volumes: pure builders and readers of the PersistentVolumeClaims behind ``/v1/volumes``.

A volume ``data`` of tenancy ``t`` is the PVC ``gpucaas-volume-data`` in ``tenant-t``, of
the storage class the operator configures (``GPUCAAS_VOLUME_STORAGE_CLASS``; production:
the NFS CSI driver ``nfs.csi.k8s.io``, so each volume is an NFS export as the design
requires; the sandbox: kube-controller-manager's HostPath provisioner, docs/sandbox.md).
The claim asks for ``ReadWriteMany``: several containers, on any node, may mount it.

Only claims carrying the label ``gpucaas.dev/volume-name`` (and managed by the API) are
volumes: the tenancy's own NFS claim (``tenant-storage``) and anything else in the
namespace never show up in a listing and cannot be deleted through the API.

Sizes are Kubernetes quantities (``10Gi``, ``500M``); the API keeps a tenancy's volumes
within its storage quota (``GPUCAAS_VOLUME_STORAGE_QUOTA``, at most
``GPUCAAS_MAX_VOLUMES`` volumes) and the tenancy controller writes the same figures into
the namespace's ResourceQuota, scoped to the storage class
(``<class>.storageclass.storage.k8s.io/requests.storage``), so the cluster refuses what
the API would refuse even if the API were bypassed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from core import crds
from services.api.domain import sizing

PVC_PREFIX = "gpucaas-volume-"
LABEL_NAME = "gpucaas.dev/volume-name"
MANAGED_BY = "gpucaas-api"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 63 - len(PVC_PREFIX)
NAME_RULE = f"1-{NAME_MAX} lowercase letters, digits or '-', starting and ending with a letter or digit"
MIN_SIZE = 1 << 20  # 1Mi
MAX_MOUNTS = 8
#: where a volume may not be mounted: the kernel's and the runtime's own trees
RESERVED_PATHS = ("/dev", "/proc", "/sys")
MOUNT_PATH_MAX = 1024


def check_name(value: str) -> str:
    if len(value) > NAME_MAX or not NAME.match(value):
        raise ValueError(f"{value!r} is not a valid volume name; allowed: {NAME_RULE}")
    return value


def parse_size(value: str) -> int:
    """A size quantity → bytes; at least 1Mi (``ValueError`` says what is allowed)."""
    try:
        n = sizing.parse_bytes(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a size; give a Kubernetes quantity such as 10Gi, 500Mi or 1Ti") from None
    if n < MIN_SIZE:
        raise ValueError(f"{value!r} is too small; a volume holds at least {sizing.format_bytes(MIN_SIZE)}")
    return n


def check_mount_path(value: str) -> str:
    """An absolute, normalised path that is not ``/`` and not under /dev, /proc or /sys."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (it must start with '/')")
    if "\x00" in value or ":" in value:
        raise ValueError(f"{value!r} must not contain ':' or NUL characters")
    path = posixpath.normpath(value)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if path == "/":
        raise ValueError("'/' cannot be a mount path (the container's root)")
    for reserved in RESERVED_PATHS:
        if path == reserved or path.startswith(reserved + "/"):
            raise ValueError(f"{value!r} is under {reserved}, which the container's runtime owns")
    return path


def pvc_name(name: str) -> str:
    return PVC_PREFIX + name


def selector() -> str:
    """The label selector of the API's volume claims (any name)."""
    return f"{LABEL_NAME},{crds.LABEL_MANAGED_BY}={MANAGED_BY}"


def build_pvc(*, tenancy: str, name: str, size_bytes: int, storage_class: str) -> dict[str, Any]:
    """The PersistentVolumeClaim of volume ``name``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": pvc_name(name),
            "namespace": crds.tenant_namespace(tenancy),
            "labels": {crds.LABEL_TENANCY: tenancy, crds.LABEL_MANAGED_BY: MANAGED_BY, LABEL_NAME: name},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": sizing.format_bytes(size_bytes)}},
        },
    }


def public_volume(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a listing shows of a volume claim: name, size, status, creation time."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "")
    return {
        "name": (meta.get("labels") or {}).get(LABEL_NAME, ""),
        "size": requested,
        "status": "Deleting" if meta.get("deletionTimestamp") else (obj.get("status") or {}).get("phase", "Pending"),
        "storage_class": spec.get("storageClassName"),
        "created_at": meta.get("creationTimestamp"),
    }


def claimed_bytes(objs: Iterable[Mapping[str, Any]], *, but: str | None = None) -> int:
    """The storage the volume claims ask for together (leaving out volume ``but``)."""
    total = 0
    for obj in objs:
        public = public_volume(obj)
        if public["name"] != but and public["size"]:
            total += sizing.parse_bytes(public["size"])
    return total


def mounts_of(volumes: Iterable[Mapping[str, Any]] | None) -> list[str]:
    """The volume names a container's stored ``volumes`` mount."""
    return [str(v.get("name")) for v in volumes or ()]


class Quota:
    """A tenancy's volume allowance: its storage class, the storage its claims may ask for
    together and how many there may be; the Tenancy's ``spec.volumes`` carries it to the
    tenancy controller, which writes it into the namespace's ResourceQuota."""

    __slots__ = ("storage_class", "storage_bytes", "count")

    def __init__(self, storage_class: str, storage_bytes: int, count: int) -> None:
        self.storage_class = storage_class
        self.storage_bytes = storage_bytes
        self.count = count

    def spec(self) -> dict[str, Any]:
        return {
            "storageClassName": self.storage_class,
            "storageQuota": sizing.format_bytes(self.storage_bytes),
            "maxVolumes": self.count,
        }
