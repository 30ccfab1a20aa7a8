"""The Tenancy as the controller understands it: typed, validated, pure.

The CRD's OpenAPI schema (and its CEL rule on the name) rejects most bad input at
the API server; this module checks the same rules again plus those a schema
cannot say (an NFS server on a loopback or link-local address), because a
Tenancy may predate a schema change or come from a server that does not
validate. Every failure is an :class:`~.errors.InvalidSpec` naming the field
and what is allowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core import crds

from .errors import InvalidSpec

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HOST_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti|Pi)?$")
MAX_NAME = 63 - len(crds.TENANT_NAMESPACE_PREFIX)  # tenant-<name> must be a DNS label
MAX_QUOTA = 100000
#: The largest fair-sharing weight (the CRD's maximum): weights are relative, so a bound
#: keeps a typo (10000 for 1.0) from starving every other tenancy.
MAX_WEIGHT = 1000.0
#: The smallest: Kueue's weight is a quantity, written to the thousandth (``1500m``).
MIN_WEIGHT = 0.001


@dataclass(frozen=True)
class NFSSpec:
    server: str
    path: str
    read_only: bool = False
    capacity: str = "1Ti"

    @property
    def server_ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The server as an address when it is written as one, else None (a host name)."""
        try:
            return ipaddress.ip_address(self.server)
        except ValueError:
            return None


@dataclass(frozen=True)
class VolumesSpec:
    """The tenancy's volume allowance: claims of ``storage_class`` may request ``storage_quota``
    together, ``max_volumes`` of them."""

    storage_class: str
    storage_quota: str
    max_volumes: int


@dataclass(frozen=True)
class TenancySpec:
    gpu_quota: int = 8
    pod_quota: int = 50
    allow_internet: bool = False
    nfs: NFSSpec | None = None
    cpu_quota: str | None = None  # a quantity; None = no CPU cap
    memory_quota: str | None = None
    volumes: VolumesSpec | None = None
    #: GPUs the tenancy is guaranteed when the fleet is contended (Kueue's nominal quota,
    #: docs/queues.md); at most ``gpu_quota``, which stays its cap.
    guaranteed_gpus: int = 0
    #: Its fair-sharing weight against the other tenancies for what nobody is guaranteed.
    weight: float = 1.0


@dataclass(frozen=True)
class Tenancy:
    """Identity of the Tenancy object plus its validated spec."""

    name: str
    uid: str
    generation: int | None
    spec: TenancySpec

    @property
    def namespace(self) -> str:
        return crds.tenant_namespace(self.name)


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidSpec("metadata.name", "must be a non-empty string")
    if len(name) > MAX_NAME or not _DNS_LABEL.match(name):
        raise InvalidSpec(
            "metadata.name",
            f"{name!r} cannot form namespace tenant-<name>: use at most {MAX_NAME} lowercase letters, digits "
            "and '-', starting and ending with a letter or digit",
        )
    return name


def _int_field(spec: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(f"spec.{key}", f"must be an integer between {minimum} and {MAX_QUOTA}, got {value!r}")
    if not minimum <= value <= MAX_QUOTA:
        raise InvalidSpec(f"spec.{key}", f"must be between {minimum} and {MAX_QUOTA}, got {value}")
    return value


def _nfs(raw: Any) -> NFSSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidSpec("spec.nfs", "must be an object with server and path")
    server = raw.get("server")
    if not isinstance(server, str) or not server:
        raise InvalidSpec("spec.nfs.server", "is required: a host name or an IP address")
    try:
        address = ipaddress.ip_address(server)
    except ValueError:
        address = None
        if len(server) > 253 or not _HOST_NAME.match(server) or re.fullmatch(r"[0-9.]+", server):
            raise InvalidSpec(
                "spec.nfs.server",
                f"{server!r} is neither an IP address nor a host name (lowercase DNS labels separated by '.')",
            ) from None
    if address is not None and (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
    ):
        raise InvalidSpec(
            "spec.nfs.server",
            f"{server} is a loopback, link-local (metadata), unspecified, multicast or reserved address; "
            "give the NFS server's routable address",
        )
    path = raw.get("path")
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path or len(path) > 1024:
        raise InvalidSpec("spec.nfs.path", f"must be an absolute export path such as /exports/team, got {path!r}")
    if any(part == ".." for part in path.split("/")):
        raise InvalidSpec("spec.nfs.path", f"must not contain '..' components, got {path!r}")
    read_only = raw.get("readOnly", False)
    if not isinstance(read_only, bool):
        raise InvalidSpec("spec.nfs.readOnly", f"must be true or false, got {read_only!r}")
    capacity = raw.get("capacity", "1Ti")
    if not isinstance(capacity, str) or not _QUANTITY.match(capacity):
        raise InvalidSpec("spec.nfs.capacity", f"must be a quantity such as 500Gi or 1Ti, got {capacity!r}")
    return NFSSpec(server=server, path=path, read_only=read_only, capacity=capacity)


def parse_tenancy(body: Mapping[str, Any]) -> Tenancy:
    """The typed Tenancy of a wire-format object; raises InvalidSpec naming the field."""
    meta = body.get("metadata") or {}
    name = validate_name(meta.get("name", ""))
    spec = body.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise InvalidSpec("spec", "must be an object")
    network = spec.get("network") or {}
    if not isinstance(network, Mapping):
        raise InvalidSpec("spec.network", "must be an object")
    allow_internet = network.get("allowInternet", False)
    if not isinstance(allow_internet, bool):
        raise InvalidSpec("spec.network.allowInternet", f"must be true or false, got {allow_internet!r}")
    gpu_quota = _int_field(spec, "gpuQuota", 8, 0)
    guaranteed = _int_field(spec, "guaranteedGpus", 0, 0)
    if guaranteed > gpu_quota:
        raise InvalidSpec(
            "spec.guaranteedGpus", f"must be at most spec.gpuQuota ({gpu_quota}), the tenancy's cap; got {guaranteed}"
        )
    return Tenancy(
        name=name,
        uid=str(meta.get("uid", "")),
        generation=meta.get("generation"),
        spec=TenancySpec(
            gpu_quota=gpu_quota,
            pod_quota=_int_field(spec, "podQuota", 50, 1),
            allow_internet=allow_internet,
            nfs=_nfs(spec.get("nfs")),
            cpu_quota=_quantity_field(spec, "cpuQuota", QUANTITY_CPU),
            memory_quota=_quantity_field(spec, "memoryQuota", QUANTITY_BYTES),
            volumes=_volumes(spec.get("volumes")),
            guaranteed_gpus=guaranteed,
            weight=_weight(spec.get("weight", 1)),
        ),
    )


def _weight(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_WEIGHT <= value <= MAX_WEIGHT:
        raise InvalidSpec("spec.weight", f"must be a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}, got {value!r}")
    return float(value)


_STORAGE_CLASS = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _volumes(raw: Any) -> VolumesSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidSpec("spec.volumes", "must be an object")
    storage_class = raw.get("storageClassName")
    if not isinstance(storage_class, str) or len(storage_class) > 200 or not _STORAGE_CLASS.match(storage_class):
        raise InvalidSpec("spec.volumes.storageClassName", f"must be a StorageClass name, got {storage_class!r}")
    quota = _quantity_field(raw, "storageQuota", QUANTITY_BYTES, where="spec.volumes.storageQuota")
    if quota is None:
        raise InvalidSpec("spec.volumes.storageQuota", "must be a quantity such as 100Gi")
    return VolumesSpec(
        storage_class=storage_class, storage_quota=quota, max_volumes=_int_field(raw, "maxVolumes", 0, 0)
    )


QUANTITY_CPU = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")
QUANTITY_BYTES = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti|Pi)?$")


def _quantity_field(
    spec: Mapping[str, Any], key: str, pattern: re.Pattern[str], *, where: str | None = None
) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise InvalidSpec(
            where or f"spec.{key}",
            f"must be a quantity such as {'96' if key == 'cpuQuota' else '1792Gi'}, got {value!r}",
        )
    return value
