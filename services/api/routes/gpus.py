"""Admin actions on one GPU: quarantine it, or clear its quarantine.

The GPU is named by node and PCI address; its GPULease carries the state machine
(``core.lease_states``). A transition the machine forbids (quarantining
a GPU a running container holds, releasing one that is not quarantined) is a 409
that says why; a concurrent change of the lease is retried.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path
from pydantic import Field, StrictBool

from core import crds, lease_states
from core.kube import Conflict as KubeConflict, KubeError, NotFound as KubeNotFound
from core.lease_store import lease_name
from services.api import errors
from services.api.domain import inventory
from services.api.domain.models import StrictInput
from services.api.routes.deps import AdminUser, KubeDep

router = APIRouter(prefix="/v1/admin/gpus", tags=["admin"])

PCI_PATTERN = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
NodeName = Path(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="Node name.")
PciAddress = Path(pattern=PCI_PATTERN, description="PCI address, e.g. 0000:18:00.0.")


class QuarantineRequest(StrictInput):
    reason: str = Field("quarantined by an admin", min_length=1, max_length=512)


class ReleaseRequest(StrictInput):
    skip_check: StrictBool = Field(False, description="Free the GPU without a new firmware check.")


def _transition(kube: Any, node: str, pci: str, change: Any) -> dict[str, Any]:
    name = lease_name(node, pci)
    for _ in range(5):
        try:
            lease = kube.get_cluster_object(crds.GPULEASE_PLURAL, name)
        except KubeNotFound as exc:
            raise errors.NotFound(f"no GPU {pci} on node {node} (no GPULease {name})") from exc
        except KubeError as exc:
            raise errors.Unavailable(f"Kubernetes API unavailable: {exc}") from exc
        try:
            status = change(lease.get("status"))
        except lease_states.IllegalTransition as exc:
            raise errors.Conflict(f"GPU {pci} on {node}: {exc}") from exc
        body = {
            "apiVersion": crds.API_VERSION,
            "kind": "GPULease",
            "metadata": {"name": name, "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": lease.get("spec", {}),
            "status": status,
        }
        try:
            return inventory.lease_summary(kube.replace_cluster_object_status(crds.GPULEASE_PLURAL, body))
        except KubeConflict:
            continue
        except KubeError as exc:
            raise errors.Unavailable(f"Kubernetes API unavailable: {exc}") from exc
    raise errors.Conflict(f"GPU {pci} on {node}: its lease kept changing; try again")


@router.post("/{node}/{pci_address}/quarantine")
def quarantine_gpu(
    kube: KubeDep, _admin: AdminUser, body: QuarantineRequest, node: str = NodeName, pci_address: str = PciAddress
) -> dict[str, Any]:
    """Quarantine a GPU: the device plugin reports it Unhealthy until an admin releases it."""
    return _transition(kube, node, pci_address, lambda st: lease_states.admin_quarantine(st, body.reason))


@router.post("/{node}/{pci_address}/release")
def release_gpu(
    kube: KubeDep, _admin: AdminUser, body: ReleaseRequest, node: str = NodeName, pci_address: str = PciAddress
) -> dict[str, Any]:
    """Clear a GPU's quarantine; it is checked again first unless ``skip_check``."""
    return _transition(kube, node, pci_address, lambda st: lease_states.admin_release(st, body.skip_check))
