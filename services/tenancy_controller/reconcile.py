"""The pure heart of the controller: what a Tenancy should own, and what its status says.

``reconcile_tenancy`` turns a Tenancy (wire dict) plus the few observations it
depends on (the existing namespace, the NFS server's addresses) into a
:class:`Plan`: the desired objects grouped by component. The caller applies
the plan through the Kubernetes adapter, records per-component outcomes, and
asks ``tenancy_status`` for the status to write. No I/O here; everything is
tested by equality.

Status: ``phase`` is Ready only when every component's objects exist as
specified; Failed when the spec cannot be realised (the Ready condition names
the field); Pending otherwise; Terminating while the finalizer runs.
Conditions follow the Kubernetes convention and keep ``lastTransitionTime``
unless their status flips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core import crds
from core.dra import AllocationMode

from . import builders, policies, queues
from .comparison import is_subset, matches  # noqa: F401 - part of this module's API
from .errors import InvalidSpec, NotReadyYet
from .spec import Tenancy, parse_tenancy

# Components, in the order they are applied; each becomes a <Component>Ready condition.
NAMESPACE = "Namespace"
NETWORK = "NetworkPolicy"
QUOTA = "Quota"
STORAGE = "Storage"
#: With queueing by Kueue only: the tenancy's ClusterQueue and LocalQueue (:mod:`.queues`).
QUEUE = "Queue"
COMPONENTS = (NAMESPACE, NETWORK, QUOTA, STORAGE)

PENDING, READY, TERMINATING, FAILED = "Pending", "Ready", "Terminating", "Failed"


@dataclass(frozen=True)
class Plan:
    """Desired children of one Tenancy, by component, in the order they are applied (Storage may
    be empty: no NFS asked; Queue only with queueing by Kueue)."""

    tenancy: Tenancy
    components: dict[str, list[dict[str, Any]]]
    namespace_owned: bool = True
    notes: dict[str, str] = field(default_factory=dict)
    #: (kind, name, namespace) of children the Tenancy no longer wants (deleted when it owns them).
    absent: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: Objects a component needs that every tenancy shares (the GPU ResourceFlavor, the container
    #: classes' WorkloadPriorityClasses), applied before the component's own: no tenancy owns
    #: them, so they are no child of this one.
    shared: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The Tenancy's own children (the shared objects are not among them)."""
        return [obj for objs in self.components.values() for obj in objs]


@dataclass(frozen=True)
class Outcome:
    """What applying one component came to."""

    ok: bool
    reason: str
    message: str


def owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """True when ``obj`` carries an ownerReference to the Tenancy with this uid."""
    if not obj:
        return False
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("kind") == "Tenancy" and r.get("uid") == uid for r in refs)


def reconcile_tenancy(
    body: Mapping[str, Any],
    *,
    network: policies.NetworkConfig,
    observed_namespace: Mapping[str, Any] | None = None,
    nfs_addresses: Sequence[str] = (),
    pod_security_level: str = "restricted",
    api_access: builders.ApiAccess | None = None,
    allocation_mode: AllocationMode = "device-plugin",
    kueue_flavor: queues.GpuFlavor | None = None,
    partition_check: bool = False,
) -> Plan:
    """The desired children of the Tenancy ``body``; with ``kueue_flavor`` (queueing by Kueue) its
    ClusterQueue and LocalQueue too, counting GPUs of that flavor (behind the partition
    AdmissionCheck with ``partition_check``), and a quota without GPUs.

    Raises InvalidSpec when the spec cannot be realised and NotReadyYet when the
    namespace is still being deleted (a recreate must wait for it to go).
    """
    tenancy = parse_tenancy(body)
    notes: dict[str, str] = {}
    owned = True
    if observed_namespace is not None:
        meta = observed_namespace.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            raise NotReadyYet(f"namespace {tenancy.namespace} is being deleted; waiting for it to go")
        owned = owned_by(observed_namespace, tenancy.uid)
        if not owned:
            other = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Tenancy"]
            if other:
                raise InvalidSpec(
                    "metadata.name",
                    f"namespace {tenancy.namespace} belongs to another Tenancy (uid {other[0].get('uid')})",
                )
            notes[NAMESPACE] = f"namespace {tenancy.namespace} existed before the tenancy; it is used but never deleted"
    components: dict[str, list[dict[str, Any]]] = {
        NAMESPACE: [builders.build_namespace(tenancy, owned=owned, pod_security_level=pod_security_level)]
        + ([builders.build_api_secrets_role_binding(tenancy, api_access)] if api_access else []),
        NETWORK: [
            policies.build_cilium_network_policy(tenancy, network),
            policies.build_network_policy(tenancy, network, nfs_addresses=nfs_addresses),
        ],
        QUOTA: [
            builders.build_resource_quota(
                tenancy, allocation_mode=allocation_mode, gpus_queued=kueue_flavor is not None
            ),
            builders.build_limit_range(tenancy),
        ]
        + (builders.build_claim_templates(tenancy) if allocation_mode == "dra" else []),
        STORAGE: [],
    }
    nfs = tenancy.spec.nfs
    absent: list[tuple[str, str, str | None]] = []
    if nfs is not None:
        components[STORAGE] = [
            builders.build_persistent_volume(tenancy, nfs),
            builders.build_persistent_volume_claim(tenancy, nfs),
        ]
    else:
        absent = [
            ("PersistentVolumeClaim", builders.PVC_NAME, tenancy.namespace),
            ("PersistentVolume", builders.persistent_volume_name(tenancy.name), None),
        ]
    shared: dict[str, list[dict[str, Any]]] = {}
    if kueue_flavor is not None:
        components[QUEUE] = [
            queues.build_cluster_queue(tenancy, kueue_flavor, partition_check=partition_check),
            queues.build_local_queue(tenancy),
        ]
        shared[QUEUE] = queues.build_shared(kueue_flavor, partition_check=partition_check)
    return Plan(
        tenancy=tenancy,
        components=components,
        namespace_owned=owned,
        notes=notes,
        absent=absent,
        shared=shared,
    )


def _condition(
    ctype: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int | None,
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    before = previous.get(ctype)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    cond: dict[str, Any] = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def _previous(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in (status or {}).get("conditions") or [] if isinstance(c, Mapping) and "type" in c}


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def tenancy_status(
    plan: Plan,
    outcomes: Mapping[str, Outcome],
    *,
    previous: Mapping[str, Any] | None,
    now: datetime,
) -> dict[str, Any]:
    """Status after applying ``plan``: Ready iff every component's outcome is ok."""
    t = plan.tenancy
    prev = _previous(previous)
    stamp = timestamp(now)
    conditions = []
    for comp in plan.components:
        out = outcomes.get(comp) or Outcome(False, "NotApplied", "not reconciled yet")
        conditions.append(_condition(f"{comp}Ready", out.ok, out.reason, out.message, t.generation, prev, stamp))
    failing = [c for c in conditions if c["status"] != "True"]
    if failing:
        message = "; ".join(f"{c['type']}: {c['message']}" for c in failing)
        ready = _condition("Ready", False, failing[0]["reason"], message, t.generation, prev, stamp)
        phase = PENDING
    else:
        message = f"namespace {t.namespace} is ready"
        ready = _condition("Ready", True, "Reconciled", message, t.generation, prev, stamp)
        phase = READY
    status: dict[str, Any] = {
        "phase": phase,
        "namespace": t.namespace,
        "message": message,
        "conditions": [ready, *conditions],
    }
    if t.generation is not None:
        status["observedGeneration"] = t.generation
    return status


def failed_status(
    body: Mapping[str, Any], error: InvalidSpec, *, previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """Status of a Tenancy whose spec cannot be realised: phase Failed, Ready=False/InvalidSpec."""
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    ready = _condition("Ready", False, "InvalidSpec", str(error), generation, _previous(previous), timestamp(now))
    status: dict[str, Any] = {"phase": FAILED, "message": str(error), "conditions": [ready]}
    name = meta.get("name")
    if isinstance(name, str) and error.field != "metadata.name":
        status["namespace"] = crds.tenant_namespace(name)
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def terminating_status(
    body: Mapping[str, Any], message: str, *, previous: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """Status while the finalizer cleans up (or waits for pods)."""
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    ready = _condition("Ready", False, "Terminating", message, generation, _previous(previous), timestamp(now))
    status = {**(previous or {}), "phase": TERMINATING, "message": message, "conditions": [ready]}
    return status


def status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` would change anything (ignoring nothing: timestamps are kept stable)."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())
