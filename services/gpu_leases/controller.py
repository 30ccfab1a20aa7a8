"""GPULease handlers for `gpucaas controller`: drive Releasing -> Checking -> result.

Kopf timers visit every lease (level-triggered, so a controller restart mid-check
simply continues from the status it finds; the watch's copy decides whether a visit reads
the lease at all, :func:`tick`):

* ``Leased`` whose holder pod is gone, or finished longer than the grace period ago
  (the node side normally notices first; this covers a node agent that is down);
* ``Releasing`` -> ``Checking`` (attempt 1): the node side runs the firmware check; this
  one also on the lease's watch event, at once (the GPU's next container waits for the check);
* ``Checking`` without a result after ``CHECK_TIMEOUT_S`` -> a new attempt, up to
  ``CHECK_ATTEMPTS``; then ``Quarantined`` with reason ``CheckTimedOut``.
The node writes the check result itself; the controller never guesses one.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client

from core import lease_states as states
from core.crds import GPULEASE_PLURAL, GROUP, VERSION
from core.kube import Kube, KubeError, NotFound, translated
from core.lease_store import LeaseConflict, LeaseStore

log = logging.getLogger(__name__)

LEASE = (GROUP, VERSION, GPULEASE_PLURAL)
CHECK_TIMEOUT_S = 30.0
CHECK_ATTEMPTS = 3
TERMINATED_GRACE_S = 10.0
INTERVAL_S = 2.0


def _age_s(stamp: str | None, now: dt.datetime) -> float:
    if not stamp:
        return float("inf")
    return (now - dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()


def check_timed_out(status: Mapping[str, Any], now: dt.datetime, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
    """A ``Checking`` lease's check has no result ``timeout_s`` after it was requested."""
    check = status.get("lastCheck") or {}
    return not check.get("result") and _age_s(check.get("at"), now) >= timeout_s


def holder_gone(core: client.CoreV1Api, holder: dict[str, Any], now: dt.datetime) -> str | None:
    """Why the holder pod no longer needs the GPU, or None while it does."""
    ns, pod = holder.get("namespace"), holder.get("pod")
    if not ns or not pod:
        return "lease has no holder pod"
    try:
        with translated(f"get pod {ns}/{pod}"):
            obj = core.read_namespaced_pod(pod, ns)
    except NotFound:
        return f"pod {ns}/{pod} was deleted"
    uid = obj.metadata.uid if obj.metadata else None
    if holder.get("podUID") and uid != holder["podUID"]:
        return f"pod {ns}/{pod} was replaced by a new pod of the same name"
    status = obj.status
    phase = status.phase if status else None
    if status and phase in ("Succeeded", "Failed"):
        finished = [
            cs.state.terminated.finished_at
            for cs in (status.container_statuses or [])
            if cs.state and cs.state.terminated and cs.state.terminated.finished_at
        ]
        if not finished or (now - max(finished)).total_seconds() >= TERMINATED_GRACE_S:
            return f"pod {ns}/{pod} {phase}"
    return None


def step(
    store: LeaseStore,
    core: client.CoreV1Api,
    lease: dict[str, Any],
    now: dt.datetime,
    check_timeout_s: float = CHECK_TIMEOUT_S,
    check_attempts: int = CHECK_ATTEMPTS,
) -> str | None:
    """Advance one lease if it is the controller's turn; returns what was done."""
    status = lease.get("status") or {}
    state = states.state_of(status)
    if state is states.LeaseState.LEASED:
        why = holder_gone(core, status.get("holder") or {}, now)
        if why:
            store.write_status(lease, states.released(status, why, now))
            return f"released: {why}"
    elif state is states.LeaseState.RELEASING:
        store.write_status(lease, states.check_started(status, now))
        return "check requested"
    elif state is states.LeaseState.CHECKING:
        if check_timed_out(status, now, check_timeout_s):
            attempts = int((status.get("lastCheck") or {}).get("attempts", 1))
            if attempts < check_attempts:
                store.write_status(lease, states.check_started(status, now))
                return f"check retried (attempt {attempts + 1})"
            node = lease["spec"]["node"]
            store.write_status(
                lease,
                states.check_failed(
                    status,
                    "CheckTimedOut",
                    f"no check result from node {node} after {attempts} attempts of {check_timeout_s:.0f}s; "
                    "is the device plugin running there?",
                    now=now,
                ),
            )
            return "quarantined: check timed out"
    return None


def tick(store: LeaseStore, core: client.CoreV1Api, cached: Mapping[str, Any], now: dt.datetime) -> str | None:
    """One timer visit of a lease, given the copy Kopf's watch holds (``cached``).

    That copy says whether it may be the controller's turn: a lease ``Leased`` to a pod that
    still needs it, ``Free``, quarantined, or in a check that has not timed out needs nothing,
    and costs no read of the lease. Only otherwise is the lease read afresh (its
    resourceVersion guards the write) and stepped. Every lease is visited every
    ``INTERVAL_S``: reading each one each time was most of the API server's requests from the
    controller (8 GPUs a node, 4 reads a second each).
    """
    status = cached.get("status") or {}
    state = states.state_of(status)
    if state is states.LeaseState.LEASED:
        if holder_gone(core, status.get("holder") or {}, now) is None:
            return None
    elif state is states.LeaseState.CHECKING:
        if not check_timed_out(status, now):
            return None
    elif state is not states.LeaseState.RELEASING:
        return None
    lease = store.get(cached["metadata"]["name"])  # the freshest copy, with its resourceVersion
    if lease is None:
        return None
    return step(store, core, lease, now)


def register(registry: kopf.OperatorRegistry, settings: Any) -> None:
    """Add the GPULease handlers to ``registry``."""

    @kopf.on.startup(registry=registry)
    def gpu_leases_startup(memo: Any, **_: Any) -> None:
        api = Kube(memo.kube_configuration)
        memo.gpu_leases = (LeaseStore(api), api.core, api)

    @kopf.on.cleanup(registry=registry)
    def gpu_leases_cleanup(memo: Any, **_: Any) -> None:
        if getattr(memo, "gpu_leases", None):
            memo.gpu_leases[2].close()

    def released(body: kopf.Body, **_: Any) -> bool:
        return states.state_of(body.get("status")) is states.LeaseState.RELEASING

    # A lease the node has just released asks for its check at once, not at the lease's next
    # timer visit (up to INTERVAL_S later): until the check passes, the GPU's next container
    # waits in PreStartContainer. The timer still visits it (a missed event, a restart).
    @kopf.on.event(*LEASE, id="lease-released", when=released, registry=registry)
    @kopf.timer(*LEASE, id="lease-lifecycle", interval=INTERVAL_S, sharp=False, registry=registry)
    def lease_lifecycle(
        body: kopf.Body, memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
    ) -> None:
        store, core, _api = memo.gpu_leases
        name = body["metadata"]["name"]
        try:
            done = tick(store, core, body, dt.datetime.now(dt.UTC))
        except LeaseConflict:
            return  # the node side moved it; the next tick looks again
        except states.IllegalTransition as exc:
            logger.warning("lease %s: %s", name, exc)
            return
        except KubeError as exc:  # "forbidden: <user> cannot ..." or "Kubernetes unreachable at ..."
            raise kopf.TemporaryError(f"lease {name}: {exc.summary()}", delay=INTERVAL_S) from exc
        if done:
            logger.info("lease %s (%s %s): %s", name, body["spec"]["node"], body["spec"]["pciAddress"], done)
