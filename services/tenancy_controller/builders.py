"""Typed, pure builders of every object a Tenancy owns: one ``build_<kind>`` per kind.

Inputs are typed values (the validated :class:`~.spec.Tenancy`, names, numbers);
outputs are wire-format dicts ready for the API server. The network policies
live in :mod:`.policies`; this module holds the namespace, quota and storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import crds, dra

from .spec import NFSSpec, Tenancy

MANAGER = "gpucaas-tenancy-controller"

# Names of the children inside the tenant namespace (PVC name is a cross-service contract).
POLICY_NAME = "tenant-isolation"
QUOTA_NAME = "tenant-quota"
LIMIT_RANGE_NAME = "tenant-limits"
PVC_NAME = "tenant-storage"
GPU_RESOURCE = "nvidia.com/gpu"

# LimitRange defaults for containers that do not say: small enough that a
# forgotten request does not eat a node, large enough for a Kata guest to boot.
DEFAULT_CPU_LIMIT = "2"
DEFAULT_MEMORY_LIMIT = "8Gi"
DEFAULT_CPU_REQUEST = "500m"
DEFAULT_MEMORY_REQUEST = "1Gi"
MIN_MEMORY = "128Mi"  # below this a Kata guest kernel does not come up
NFS_MOUNT_OPTIONS = ("nfsvers=4.1", "hard", "noresvport")


def persistent_volume_name(tenancy: str) -> str:
    return f"{crds.tenant_namespace(tenancy)}-storage"


def owner_reference(tenancy: Tenancy) -> dict[str, Any]:
    """The ownerReference every child carries: garbage collection follows the Tenancy."""
    return {
        "apiVersion": crds.API_VERSION,
        "kind": "Tenancy",
        "name": tenancy.name,
        "uid": tenancy.uid,
        "controller": True,
    }


def child_labels(tenancy: Tenancy) -> dict[str, str]:
    return {crds.LABEL_TENANCY: tenancy.name, crds.LABEL_MANAGED_BY: MANAGER}


def child_metadata(tenancy: Tenancy, name: str, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": child_labels(tenancy),
        "ownerReferences": [owner_reference(tenancy)],
    }
    if namespaced:
        meta["namespace"] = tenancy.namespace
    return meta


def build_namespace(tenancy: Tenancy, *, owned: bool = True, pod_security_level: str = "restricted") -> dict[str, Any]:
    """Namespace tenant-<name> with the tenancy label and Pod Security admission labels.

    The API's pods pass ``restricted`` (non-root UID in the VM, no escalation, no
    capabilities, RuntimeDefault seccomp), so it is enforced by default. ``baseline``
    (no hostPath, hostNetwork, privileged, host PID/IPC: the ways out of the VM
    boundary through the node) is the floor for tenants that run as root inside
    their Kata VM; ``restricted`` is then still warned and audited
    (docs/pod-security.md). ``owned=False`` is for a
    namespace that existed before the Tenancy: it gets the labels but no
    ownerReference, so neither garbage collection nor the finalizer deletes it.
    """
    labels = {
        **child_labels(tenancy),
        "pod-security.kubernetes.io/enforce": pod_security_level,
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/warn-version": "latest",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/audit-version": "latest",
    }
    meta: dict[str, Any] = {"name": tenancy.namespace, "labels": labels}
    if owned:
        meta["ownerReferences"] = [owner_reference(tenancy)]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def build_resource_quota(
    tenancy: Tenancy, *, allocation_mode: dra.AllocationMode = "device-plugin", gpus_queued: bool = False
) -> dict[str, Any]:
    """Caps GPUs (requests of nvidia.com/gpu), pods, and (when the spec gives them) CPU and
    memory limits, hugepage-backed memory included, and the volumes' claims (their count
    and storage, of their StorageClass); no Services that open the node to the world.

    With ``gpus_queued`` (queueing by Kueue) the tenancy's ClusterQueue holds its GPU cap
    (:mod:`.queues`), so the quota does not count GPUs: a pod over the cap then waits in the
    queue instead of being refused at creation.

    The API sizes each container from a per-GPU share of the node and sets the Tenancy's
    cpuQuota/memoryQuota to the GPU quota's worth of shares plus the Kata overhead; pod
    overhead counts against these (Kubernetes "Pod Overhead": quota uses requests/limits
    plus overhead)."""
    volumes = tenancy.spec.volumes
    hard = {
        **({} if gpus_queued else {f"requests.{GPU_RESOURCE}": str(tenancy.spec.gpu_quota)}),
        "pods": str(tenancy.spec.pod_quota),
        # the tenancy's NFS claim, plus its volumes
        "persistentvolumeclaims": str(1 + (volumes.max_volumes if volumes is not None else 0)),
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    if volumes is not None:
        # scoped to the volumes' class, so that the NFS claim (no class) does not count
        # (Kubernetes docs, "Resource Quotas": storage resource quota per StorageClass)
        scope = f"{volumes.storage_class}.storageclass.storage.k8s.io"
        hard[f"{scope}/requests.storage"] = volumes.storage_quota
        hard[f"{scope}/persistentvolumeclaims"] = str(volumes.max_volumes)
    if tenancy.spec.cpu_quota is not None:
        hard["limits.cpu"] = tenancy.spec.cpu_quota
    if tenancy.spec.memory_quota is not None:
        hard["limits.memory"] = tenancy.spec.memory_quota
        hard["requests.hugepages-1Gi"] = tenancy.spec.memory_quota
    if allocation_mode == dra.DRA_MODE:
        hard.update(device_class_quota(tenancy))
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": child_metadata(tenancy, QUOTA_NAME),
        "spec": {"hard": hard},
    }


def device_class_quota(tenancy: Tenancy) -> dict[str, str]:
    """The ResourceQuota ``hard`` entry capping the tenancy's claimed GPUs (allocation mode dra).

    Kubernetes counts a namespace's claimed devices per DeviceClass under
    ``<class>.deviceclass.resource.k8s.io/devices`` (Kubernetes docs, "Resource Quotas"); every
    claim asks for GPUs of the one class, a device each, so this is the GPU quota itself: the
    cluster's own backstop behind the API's admission."""
    return {dra.device_class_quota_key(): str(tenancy.spec.gpu_quota)}


def claim_template_name_list() -> list[str]:
    return [dra.claim_template_name(n) for n in dra.CLAIM_TEMPLATE_SIZES]


def build_claim_templates(tenancy: Tenancy) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates ``gpucaas-gpus-N`` (N = 1..8) the API's pods claim from in
    allocation mode dra: N GPUs of one NVLink partition for N = 2, 4, 8, else N GPUs
    (core/dra.py). Kubernetes creates one ResourceClaim per pod from it and deletes it
    with the pod (Kubernetes docs, "Dynamic Resource Allocation", ResourceClaimTemplate)."""
    out = []
    for gpus in dra.CLAIM_TEMPLATE_SIZES:
        template = dra.claim_template(gpus, tenancy.namespace)
        template["metadata"] = child_metadata(tenancy, template["metadata"]["name"])
        out.append(template)
    return out


def build_limit_range(tenancy: Tenancy) -> dict[str, Any]:
    """Default requests/limits for containers that give none, and a floor a Kata guest needs."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": child_metadata(tenancy, LIMIT_RANGE_NAME),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": DEFAULT_CPU_LIMIT, "memory": DEFAULT_MEMORY_LIMIT},
                    "defaultRequest": {"cpu": DEFAULT_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST},
                    "min": {"memory": MIN_MEMORY},
                }
            ]
        },
    }


def build_persistent_volume(tenancy: Tenancy, nfs: NFSSpec) -> dict[str, Any]:
    """NFS PersistentVolume (ReadWriteMany, Retain) pre-bound to the tenancy's PVC.

    ``claimRef`` reserves the volume for ``<namespace>/tenant-storage`` so no
    other claim in the cluster can bind it; Retain keeps the data when the
    Tenancy goes (the export itself is never touched by Kubernetes).
    """
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": child_metadata(tenancy, persistent_volume_name(tenancy.name), namespaced=False),
        "spec": {
            "capacity": {"storage": nfs.capacity},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "mountOptions": list(NFS_MOUNT_OPTIONS),
            "nfs": {"server": nfs.server, "path": nfs.path, "readOnly": nfs.read_only},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": tenancy.namespace,
                "name": PVC_NAME,
            },
        },
    }


def build_persistent_volume_claim(tenancy: Tenancy, nfs: NFSSpec) -> dict[str, Any]:
    """PVC tenant-storage bound by name to the tenancy's PV (no storage class, no dynamic provisioning)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": child_metadata(tenancy, PVC_NAME),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": nfs.capacity}},
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "volumeName": persistent_volume_name(tenancy.name),
        },
    }


API_SECRETS_BINDING = "gpucaas-api-tenant-secrets"


@dataclass(frozen=True)
class ApiAccess:
    """The API's ServiceAccount and the ClusterRole (from the chart) that lets it keep tenant
    secrets and registry credentials: bound per tenant namespace, never cluster-wide."""

    service_account_namespace: str
    service_account_name: str
    cluster_role: str


def build_api_secrets_role_binding(tenancy: Tenancy, access: ApiAccess) -> dict[str, Any]:
    """RoleBinding in the tenant namespace: the API may manage Secrets here, and only here.

    Kubernetes RBAC cannot grant rights over namespaces matching a pattern, so a ClusterRole
    bound by a RoleBinding in each tenant namespace is how the rights stay namespaced
    (Kubernetes docs, "Using RBAC Authorization": a RoleBinding may reference a ClusterRole
    to grant its permissions within the RoleBinding's namespace)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_metadata(tenancy, API_SECRETS_BINDING),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": access.cluster_role},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": access.service_account_name,
                "namespace": access.service_account_namespace,
            }
        ],
    }
