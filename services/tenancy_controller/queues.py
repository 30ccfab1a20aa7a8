"""Typed, pure builders of the Kueue objects the controller keeps with ``queueing=kueue`` (docs/queues.md).

Per tenancy a ClusterQueue ``tenancy-<name>`` in the cohort ``gpucaas`` and a LocalQueue
``default`` in its namespace. Shared by every tenancy (so owned by none): one ResourceFlavor per
kind of GPU node, the two container classes' WorkloadPriorityClasses, and the Cohort ``gpucaas``
holding the pool (:class:`Pool`). The GPU arithmetic, on ``nvidia.com/gpu``:

* ``nominalQuota = guaranteedGpus``: what the tenancy gets back, by preemption if need be,
  whenever it asks (``reclaimWithinCohort: Any``);
* ``borrowingLimit = gpuQuota - guaranteedGpus``: beyond its guarantee it may borrow up to its
  cap, so ``gpuQuota`` stays the most it holds at once;
* ``lendingLimit = guaranteedGpus``: all of its guarantee that it does not use is lent;
* the Cohort's own ``nominalQuota = max(0, fleet - sum of guaranteedGpus)``: the GPUs nobody is
  guaranteed (a cohort's capacity is only its members' nominal quotas and its own), borrowed by
  every ClusterQueue within its ``borrowingLimit`` and shared by fair-sharing weight.

Only GPUs are covered: CPU and memory stay capped by the tenancy's ResourceQuota (limits, Kata
overhead included, as the API sizes them per GPU), and Kueue is configured to ignore them
(``resources.excludeResourcePrefixes``: :data:`core.kueue.EXCLUDED_RESOURCE_PREFIXES`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
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


def _shared_metadata(name: str) -> dict[str, Any]:
    """An object every tenancy uses: no tenancy label and no owner, only the manager's label."""
    return {"name": name, "labels": {crds.LABEL_MANAGED_BY: MANAGER}}


def build_resource_flavor(flavor: GpuFlavor) -> dict[str, Any]:
    """The ResourceFlavor of one kind of GPU node: Kueue adds its node labels to the pods it admits
    on it (as a node selector), so that an admitted pod lands on the kind it was counted against."""
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _shared_metadata(flavor.name),
        "spec": {"nodeLabels": dict(flavor.node_labels)},
    }


#: Each container class's WorkloadPriorityClass ``description``: what the class means for its containers.
CLASS_DESCRIPTIONS = {
    kueue.STANDARD_CLASS: "gpucaas standard containers: preempted only when another tenancy takes back "
    "its guarantee or its fair share",
    kueue.INTERRUPTIBLE_CLASS: "gpucaas interruptible containers: preempted before standard ones, also "
    "for a standard container of their own tenancy",
}


def build_workload_priority_classes() -> list[dict[str, Any]]:
    """The container classes' WorkloadPriorityClasses (:data:`core.kueue.PRIORITY_OF_CLASS`): a pod
    whose priority-class label names one that does not exist is never admitted, so both are kept."""
    return [
        {
            "apiVersion": kueue.API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _shared_metadata(name),
            "value": value,
            "description": CLASS_DESCRIPTIONS[name],
        }
        for name, value in kueue.PRIORITY_OF_CLASS.items()
    ]


def build_partition_check() -> dict[str, Any]:
    """The AdmissionCheck :data:`core.kueue.PARTITION_CHECK`: Kueue admits a Workload of a
    ClusterQueue listing it only once its controller, the scheduler extender, says that a whole
    free NVLink partition of each of its pods' sizes exists (Kueue counts GPUs, not partitions)."""
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": _shared_metadata(kueue.PARTITION_CHECK),
        "spec": {"controllerName": kueue.PARTITION_CHECK_CONTROLLER},
    }


def build_shared(flavor: GpuFlavor, *, partition_check: bool = False) -> list[dict[str, Any]]:
    """What every tenancy's queues need and no tenancy owns, applied with each one's queues (the
    Cohort, which depends on every tenancy and node, is kept on its own: :class:`Pool`)."""
    return [
        build_resource_flavor(flavor),
        *build_workload_priority_classes(),
        *([build_partition_check()] if partition_check else []),
    ]


@dataclass(frozen=True)
class Pool:
    """The cohort's own quota: the fleet's GPUs that no tenancy is guaranteed."""

    #: GPUs of the nodes of the flavor's instance type (their ``nvidia.com/gpu.count``).
    fleet_gpus: int
    #: Every tenancy's ``guaranteedGpus``, summed.
    guaranteed_gpus: int
    #: How many nodes the fleet's GPUs were counted on.
    nodes: int = 0

    @property
    def gpus(self) -> int:
        return max(0, self.fleet_gpus - self.guaranteed_gpus)

    @property
    def shortfall(self) -> int:
        """The guaranteed GPUs beyond the fleet: guarantees that cannot all be given at once."""
        return max(0, self.guaranteed_gpus - self.fleet_gpus)


def pool_of(node_gpus: Collection[int], guarantees: Iterable[int]) -> Pool:
    """The pool of a fleet (each GPU node's count) and the tenancies' guarantees: recomputed whole
    from what the watches show, never adjusted by deltas, so every replica computes the same."""
    return Pool(fleet_gpus=sum(node_gpus), guaranteed_gpus=sum(guarantees), nodes=len(node_gpus))


def _count(value: Any) -> int:
    """A non-negative whole number as a label or spec field gives it, else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def node_gpus(labels: Mapping[str, str]) -> int:
    """A GPU node's GPUs, from :data:`core.kueue.GPU_COUNT_LABEL` (GPU Feature Discovery's); 0
    until it is set (a node not yet labelled brings nothing to the pool)."""
    return _count(labels.get(kueue.GPU_COUNT_LABEL))


def guarantee_of(spec: Mapping[str, Any]) -> int:
    """A Tenancy's ``spec.guaranteedGpus`` as written (0 when absent), for the pool: counted while
    the Tenancy exists, as its ClusterQueue holds it until the Tenancy is gone."""
    return _count(spec.get("guaranteedGpus"))


def build_cohort(flavor: GpuFlavor, pool: Pool) -> dict[str, Any]:
    """The Cohort every tenancy's ClusterQueue joins, holding the pool as its own nominal quota of the
    flavor's GPUs: borrowed by its members, it is how the unguaranteed GPUs are shared at all."""
    gpus = {"name": GPU_RESOURCE, "nominalQuota": str(pool.gpus)}
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "Cohort",
        "metadata": _shared_metadata(kueue.COHORT),
        "spec": {
            "resourceGroups": [
                {"coveredResources": [GPU_RESOURCE], "flavors": [{"name": flavor.name, "resources": [gpus]}]}
            ]
        },
    }


def build_cluster_queue(tenancy: Tenancy, flavor: GpuFlavor, *, partition_check: bool = False) -> dict[str, Any]:
    """The tenancy's ClusterQueue: guaranteed GPUs as nominal quota, borrowing up to its cap, its
    unused guarantee lent, its fair-sharing weight; it may reclaim its guarantee from borrowers.
    With ``partition_check``, a Workload it reserved GPUs for is admitted only once the
    :func:`build_partition_check` passes."""
    spec = tenancy.spec
    gpus = {
        "name": GPU_RESOURCE,
        "nominalQuota": str(spec.guaranteed_gpus),
        "borrowingLimit": str(spec.gpu_quota - spec.guaranteed_gpus),
        "lendingLimit": str(spec.guaranteed_gpus),
    }
    queue_spec: dict[str, Any] = {
        "cohortName": kueue.COHORT,
        # only its own namespace's LocalQueue may feed it
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenancy.namespace}},
        "resourceGroups": [
            {"coveredResources": [GPU_RESOURCE], "flavors": [{"name": flavor.name, "resources": [gpus]}]}
        ],
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": weight_quantity(spec.weight)},
    }
    if partition_check:
        queue_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": kueue.PARTITION_CHECK}]}
    return {
        "apiVersion": kueue.API_VERSION,
        "kind": "ClusterQueue",
        "metadata": child_metadata(tenancy, kueue.cluster_queue_name(tenancy.name), namespaced=False),
        "spec": queue_spec,
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
