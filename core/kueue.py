"""The names the API and the tenancy controller agree on when Kueue queues the containers.

With ``queueing`` set to ``kueue`` (both services' setting, docs/queues.md), the tenancy
controller keeps a ClusterQueue :func:`cluster_queue_name` per tenancy in the cohort
:data:`COHORT` and a LocalQueue :data:`LOCAL_QUEUE` in its namespace pointing at it, and the
API labels each pod :data:`QUEUE_LABEL` ``=`` :data:`LOCAL_QUEUE`; Kueue's pod webhook gates
the pod until the ClusterQueue admits it.
"""

from __future__ import annotations

from typing import Literal

#: Who decides which waiting container gets the next free GPUs: kube-scheduler's own queue
#: (``none``: the tenancy's ResourceQuota caps its GPUs) or Kueue (``kueue``: ClusterQueues in
#: a cohort with guarantees, borrowing and lending). The API's and the controller's must agree.
Queueing = Literal["none", "kueue"]
NO_QUEUEING: Queueing = "none"
KUEUE: Queueing = "kueue"

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
#: The label by which Kueue's plain-pod integration queues a pod, naming its LocalQueue.
QUEUE_LABEL = f"{GROUP}/queue-name"
#: The LocalQueue in every tenancy namespace.
LOCAL_QUEUE = "default"
#: The cohort every tenancy's ClusterQueue joins: unused guarantees are lent within it.
COHORT = "gpucaas"
#: What Kueue must not count (its Configuration's ``resources.excludeResourcePrefixes``): a
#: ClusterQueue covers GPUs only, and one that does not cover a resource a pod requests admits
#: nothing; CPU and memory stay capped by the tenancy's ResourceQuota.
EXCLUDED_RESOURCE_PREFIXES = ("cpu", "memory", "hugepages-", "ephemeral-storage")


def cluster_queue_name(tenancy: str) -> str:
    """The tenancy's ClusterQueue (cluster-scoped): ``tenancy-<name>``."""
    return f"tenancy-{tenancy}"


#: The label by which Kueue gives a pod's Workload a WorkloadPriorityClass (cluster-scoped).
PRIORITY_CLASS_LABEL = f"{GROUP}/priority-class"
#: The two classes a tenant picks per container (``"interruptible": true`` in the request): the
#: tenancy controller keeps one WorkloadPriorityClass of each. Kueue preempts lower priority
#: first, so interruptible work goes before standard work, within a tenancy
#: (``withinClusterQueue: LowerPriority``) and among a borrowing tenancy's containers when
#: another reclaims its guarantee or its fair share.
STANDARD_CLASS = "gpucaas-standard"
INTERRUPTIBLE_CLASS = "gpucaas-interruptible"
PRIORITY_OF_CLASS = {STANDARD_CLASS: 1000, INTERRUPTIBLE_CLASS: 0}
#: The node label giving a GPU node's GPU count (NVIDIA GPU Feature Discovery sets it): the
#: tenancy controller sums it over the GPU nodes for the cohort's own quota, the GPUs nobody is
#: guaranteed.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"


def priority_class(*, interruptible: bool) -> str:
    """The WorkloadPriorityClass of a container of that class."""
    return INTERRUPTIBLE_CLASS if interruptible else STANDARD_CLASS


#: The AdmissionCheck by which Kueue asks, before it admits a Workload whose GPUs it reserved,
#: whether a whole free NVLink partition of each pod's size exists for it (docs/queues.md):
#: kept by the tenancy controller and listed in every tenancy's ClusterQueue when the partition
#: check is on; answered by the scheduler extender, which holds the fleet's free GPUs.
PARTITION_CHECK = "gpucaas-nvlink-partition"
#: The AdmissionCheck's ``spec.controllerName``: the extender answers the checks that name it.
PARTITION_CHECK_CONTROLLER = "gpucaas.dev/nvlink-partition"
#: The pod condition the partition check sets on a running pod it preempts to give a whole NVLink
#: partition back to work within its tenancy's guarantee, before it withdraws the pod's admission
#: (Kueue then stops the pod with ``TerminationTarget``, reason ``WorkloadEvictedDueToAdmissionCheck``).
#: Its message says why, ending as Kueue's preemption messages do ("due to reclamation within the
#: cohort"). The API reads it to report the container ``Preempted``.
PREEMPTED_FOR_GUARANTEE_CONDITION = "gpucaas.dev/PreemptedForGuarantee"
