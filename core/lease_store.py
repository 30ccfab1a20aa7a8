"""GPULease objects in Kubernetes: naming, creation, and guarded status transitions.

Shared by the device plugin (the node side of leases) and the controller. Two
writers move a lease, so every transition is read-modify-write with the object's
``resourceVersion``: a concurrent write makes ours fail with 409 and the caller
re-reads and decides again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import lease_states as states
from core.crds import API_VERSION, GPULEASE_PLURAL, GROUP, VERSION
from core.kube import Conflict, NotFound, adapter

if TYPE_CHECKING:
    from kubernetes import client

    from core.kube import Kube, RestKube

log = logging.getLogger(__name__)

LABEL_NODE = "gpucaas.dev/node"


class LeaseConflict(RuntimeError):
    """Someone else changed the lease first; re-read and decide again."""


def lease_name(node: str, pci_address: str) -> str:
    return f"{node}-{pci_address.replace(':', '-').replace('.', '-')}"


def build_gpu_lease(
    node: str, pci_address: str, device_id: str | None = None, physical_id: int | None = None, model: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"node": node, "pciAddress": pci_address}
    if device_id:
        spec["deviceId"] = device_id
    if physical_id:
        spec["physicalId"] = physical_id
    if model:
        spec["model"] = model
    return {
        "apiVersion": API_VERSION,
        "kind": "GPULease",
        "metadata": {
            "name": lease_name(node, pci_address),
            "labels": {LABEL_NODE: node, "app.kubernetes.io/managed-by": "gpucaas"},
        },
        "spec": spec,
    }


class LeaseStore:
    """GPULeases through the core Kubernetes adapter (its errors, timeouts and retries)."""

    def __init__(self, api: Kube | RestKube | client.ApiClient) -> None:
        self.kube = adapter(api)
        self.custom = self.kube.custom

    def list(self, node: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": f"{LABEL_NODE}={node}"} if node else {}
        return self.kube.json(
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            GPULEASE_PLURAL,
            what="list gpuleases",
            idempotent=True,
            **kwargs,
        )["items"]

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.kube.json(
                self.custom.get_cluster_custom_object,
                GROUP,
                VERSION,
                GPULEASE_PLURAL,
                name,
                what=f"get gpulease {name}",
                idempotent=True,
            )
        except NotFound:
            return None

    def ensure(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the lease (state Free) unless it exists; return the live object."""
        try:
            created = self.kube.json(
                self.custom.create_cluster_custom_object,
                GROUP,
                VERSION,
                GPULEASE_PLURAL,
                body,
                what="create gpulease",
                idempotent=True,
            )  # 409 handled below
        except Conflict:
            live = self.get(body["metadata"]["name"])
            assert live is not None
            return live
        log.info("lease %s created for %s", created["metadata"]["name"], body["spec"]["pciAddress"])
        return self.initialize(created["metadata"]["name"])

    def initialize(self, name: str) -> dict[str, Any]:
        """Give a lease without a state its initial ``Free`` status (retried: a controller may
        add its finalizer right after creation, which changes the resourceVersion)."""
        return self.transition(name, lambda st: st if st and st.get("state") else states.initial())

    def write_status(self, lease: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace the status, guarded by the lease's resourceVersion."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "GPULease",
            "metadata": {"name": lease["metadata"]["name"], "resourceVersion": lease["metadata"]["resourceVersion"]},
            "spec": lease.get("spec", {}),
            "status": status,
        }
        try:
            return self.kube.json(
                self.custom.replace_cluster_custom_object_status,
                GROUP,
                VERSION,
                GPULEASE_PLURAL,
                lease["metadata"]["name"],
                body,
                what=f"update gpulease {lease['metadata']['name']} status",
            )
        except Conflict as exc:
            raise LeaseConflict(f"lease {lease['metadata']['name']} changed meanwhile") from exc

    def transition(
        self, name: str, change: Callable[[dict[str, Any] | None], dict[str, Any]], attempts: int = 5
    ) -> dict[str, Any]:
        """Apply ``change(status) -> status`` to the current lease, retrying on conflicts."""
        for _ in range(attempts):
            lease = self.get(name)
            if lease is None:
                raise KeyError(f"no GPULease {name}")
            try:
                return self.write_status(lease, change(lease.get("status")))
            except LeaseConflict:
                continue
        raise LeaseConflict(f"lease {name} kept changing; gave up after {attempts} attempts")
