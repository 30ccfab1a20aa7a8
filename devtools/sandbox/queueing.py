"""The sandbox's queueing (``--queueing``): with ``kueue``, Kueue's manager against the sandbox's
own cluster, and what the product is told so that it queues by it.

Kueue starts between the cluster and the nodes (:func:`start_kueue`): its CRDs must exist before
the tenancy controller watches ClusterQueues, and its pod webhook must answer before the API
makes a pod. It runs as :mod:`devtools.kueue` runs it for the tests (a host process with its
webhooks on loopback; pod integration, tenancy namespaces only, ``excludeResourcePrefixes``).
The chart's cluster side is rendered with ``queueing.mode: kueue`` (:func:`chart_values`), so
the controller's, the extender's and the API's RBAC cover Kueue's objects, and the services run
with queueing ``kueue`` and the partition AdmissionCheck (:func:`controller_env`,
:func:`extender_env`, :func:`api_env`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.kueue import KUEUE, NO_QUEUEING
from devtools.sandbox.nodes import GPU_NODE_LABELS

if TYPE_CHECKING:
    from devtools.sandbox.runner import Plan, Sandbox

QUEUEINGS = (NO_QUEUEING, KUEUE)
#: the sandbox's GPU nodes' instance type: the ResourceFlavor the controller keeps selects it
GPU_INSTANCE_TYPE = GPU_NODE_LABELS["node.kubernetes.io/instance-type"]


def check_queueing(queueing: str, *, own_cluster: bool) -> None:
    """Refuses (``ValueError``) a queueing the sandbox cannot run, before anything starts."""
    if queueing not in QUEUEINGS:
        raise ValueError(f"queueing {queueing!r}: use none or kueue")
    if queueing == KUEUE and not own_cluster:
        raise ValueError(
            "--queueing kueue runs Kueue on the sandbox's own cluster: with --kubeconfig, install Kueue on that "
            "cluster (docs/queues.md) and leave the sandbox's queueing none"
        )


def check_kueue_built(plan: Plan) -> None:
    """Refuses (``OSError``), before anything starts, ``--queueing kueue`` without ``make kueue``'s build."""
    if plan.queueing != KUEUE:
        return
    from devtools.kueue import manifests_dir
    from devtools.local_cluster import BinariesMissing, bin_dir
    from devtools.local_cluster.binaries import binary

    try:
        manifests_dir(bin_dir())
        binary("kueue", bin_dir())
    except BinariesMissing as exc:
        raise OSError(f"--queueing kueue: {exc}") from exc


def chart_values(queueing: str) -> dict[str, Any]:
    """The chart values of ``queueing`` (``queueing.mode``, and the GPU nodes' instance type)."""
    if queueing != KUEUE:
        return {}
    return {"queueing": {"mode": KUEUE, "gpuInstanceType": GPU_INSTANCE_TYPE}}


def _partition_check(queueing: str) -> str:
    """The partition AdmissionCheck is on with Kueue, as the chart's ``queueing.partitionCheck`` default."""
    return "true" if queueing == KUEUE else "false"


def controller_env(queueing: str) -> dict[str, str]:
    """The tenancy controller's queueing, as the chart's Deployment sets it."""
    return {
        "GPUCAAS_CONTROLLER_QUEUEING": queueing,
        "GPUCAAS_CONTROLLER_GPU_INSTANCE_TYPE": GPU_INSTANCE_TYPE,
        "GPUCAAS_CONTROLLER_PARTITION_CHECK": _partition_check(queueing),
    }


def extender_env(queueing: str) -> dict[str, str]:
    """The scheduler extender answers the partition AdmissionCheck with Kueue, as the chart sets it."""
    return {"GPUCAAS_PLACEMENT_PARTITION_CHECK": _partition_check(queueing)}


def api_env(queueing: str) -> dict[str, str]:
    """The API's queueing, as the chart's Deployment sets it."""
    return {"GPUCAAS_QUEUEING": queueing}


def start_kueue(sandbox: Sandbox, plan: Plan) -> None:
    """Kueue's manager, ready, its webhooks registered (``--queueing kueue`` only)."""
    if plan.queueing != KUEUE:
        return
    from devtools.kueue import Kueue

    assert sandbox.cluster is not None
    plan.say(
        "starting Kueue (its CRDs, roles and webhooks; it queues the pods of tenancy namespaces that name a "
        "LocalQueue, counting GPUs only)"
    )
    # the sandbox's before it starts: stopping the sandbox stops one that failed half-way
    kueue = sandbox.kueue = Kueue(sandbox.cluster, sandbox.state_dir / "kueue")
    kueue.start()
