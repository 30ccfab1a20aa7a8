"""Typed, pure builders of the Kueue objects a Tenancy owns with ``queueing=kueue`` (docs/queues.md).

Per tenancy a ClusterQueue ``tenancy-<name>`` in the cohort ``gpucaas`` and a LocalQueue
``default`` in its namespace; one ResourceFlavor per kind of GPU node, shared by every
ClusterQueue (so owned by none). The GPU arithmetic, on ``nvidia.com/gpu``:

* ``nominalQuota = guaranteedGpus``: what the tenancy gets back, by preemption if need be,
  whenever it asks (``reclaimWithinCohort: Any``);
* ``borrowingLimit = gpuQuota - guaranteedGpus``: beyond its guarantee it may borrow up to its
  cap, so ``gpuQuota`` stays the most it holds at once;
* ``lendingLimit = guaranteedGpus``: all of its guarantee that it does not use is lent.

Only GPUs are covered: CPU and memory stay capped by the tenancy's ResourceQuota (limits, Kata
overhead included, as the API sizes them per GPU), and Kueue is configured to ignore them
(``resources.excludeResourcePrefixes``: :data:`core.kueue.EXCLUDED_RESOURCE_PREFIXES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import crds, kueue

from .builders import GPU_RESOURCE, MANAGER, child_metadata
from .spec import Tenancy

#: The node label a GPU flavor selects its nodes by (Kubernetes' well-known instance type).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class GpuFlavor:
    """One kind of GPU node, as a Kueue ResourceFlavor: its name and the node labels it selects."""

    name: str
    node_labels: dict[str, str]

    @classmethod
    def of_instance_type(cls, instance_type: str) -> GpuFlavor:
        return cls(name=instance_type, node_labels={INSTANCE_TYPE_LABEL: instance_type})


def weight_quantity(weight: float) -> str:
    """The weight as a Kubernetes quantity in its canonical form (``1``, ``1500m``), to the thousandth."""
    milli = round(weight * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def build_resource_flavor(flavor: GpuFlavor) -> dict[str, Any]:
    """The ResourceFlavor of one kind of GPU node: Kueue adds its node labels to the pods it admits
    on it (as a node selector), so that an admitted pod lands on the kind it was counted against."""
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "ResourceFlavor",
        # no tenancy label and no owner: every tenancy's ClusterQueue uses it
        "metadata": {"name": flavor.name, "labels": {crds.LABEL_MANAGED_BY: MANAGER}},
        "spec": {"nodeLabels": dict(flavor.node_labels)},
    }


def build_cluster_queue(tenancy: Tenancy, flavor: GpuFlavor) -> dict[str, Any]:
    """The tenancy's ClusterQueue: guaranteed GPUs as nominal quota, borrowing up to its cap, its
    unused guarantee lent, its fair-sharing weight; it may reclaim its guarantee from borrowers."""
    spec = tenancy.spec
    gpus = {
        "name": GPU_RESOURCE,
        "nominalQuota": str(spec.guaranteed_gpus),
        "borrowingLimit": str(spec.gpu_quota - spec.guaranteed_gpus),
        "lendingLimit": str(spec.guaranteed_gpus),
    }
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "ClusterQueue",
        "metadata": child_metadata(tenancy, kueue.cluster_queue_name(tenancy.name), namespaced=False),
        "spec": {
            "cohortName": kueue.COHORT,
            # only its own namespace's LocalQueue may feed it
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenancy.namespace}},
            "resourceGroups": [
                {"coveredResources": [GPU_RESOURCE], "flavors": [{"name": flavor.name, "resources": [gpus]}]}
            ],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": weight_quantity(spec.weight)},
        },
    }


def build_local_queue(tenancy: Tenancy) -> dict[str, Any]:
    """The LocalQueue ``default`` of the tenancy's namespace, feeding its ClusterQueue: the queue the
    API's pods name (``kueue.x-k8s.io/queue-name``)."""
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "LocalQueue",
        "metadata": child_metadata(tenancy, kueue.LOCAL_QUEUE),
        "spec": {"clusterQueue": kueue.cluster_queue_name(tenancy.name)},
    }
