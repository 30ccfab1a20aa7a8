"""Errors of the fabric service, named by meaning.

Adapters re-raise library errors (libvirt, Fabric Manager) as these, chained with
``from``; only the HTTP edge (``server.py``) turns them into ``{code, detail}``.
"""

from __future__ import annotations


class FabricServiceError(Exception):
    """Base of every fabric-service error."""

    code = "error"
    status = 500


class InvalidRequest(FabricServiceError):
    """Bad input (unknown GPU address, malformed holder, ...)."""

    code = "invalid"
    status = 400


class NotFound(FabricServiceError):
    code = "not_found"
    status = 404


class Conflict(FabricServiceError):
    """A needed partition overlaps an active partition of another holder."""

    code = "conflict"
    status = 409

    def __init__(self, detail: str, *, holder: str | None = None, partition_id: int | None = None) -> None:
        super().__init__(detail)
        self.holder = holder
        self.partition_id = partition_id


class Unsupported(FabricServiceError):
    """Fabric Manager reports the partition unsupported (degraded GPU, failed NVLink)."""

    code = "unsupported"
    status = 422


class Unavailable(FabricServiceError):
    """Fabric Manager (or its service VM) cannot be reached or is not ready."""

    code = "unavailable"
    status = 503


class DiscoveryError(FabricServiceError):
    """NVSwitches / memory controller not found or not passable (IOMMU group, driver)."""

    code = "discovery"


class DomainXMLError(FabricServiceError):
    """The domain template or its inputs are unusable."""

    code = "domain_xml"


class ServiceVMError(FabricServiceError):
    """libvirt refused to define, start or stop the service VM."""

    code = "service_vm"


class StateError(FabricServiceError):
    """The activation records on disk cannot be read or written."""

    code = "state"
