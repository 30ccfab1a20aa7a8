"""Device binding conditions: a pod binds only to a partition that is already active.

KEP-5007 (device binding conditions, beta in Kubernetes 1.36): a device published with
``bindingConditions`` makes the scheduler wait in PreBind, after it allocated a claim,
until the driver reports each condition ``True`` in ``ResourceClaim.status.devices[]``
(or any of ``bindingFailureConditions`` ``True``, or the binding timeout passes: then the
claim is deallocated and the pod scheduled again). Activating a Fabric Manager partition
can fail (FM refuses, a partition overlapping it is still held), so gpucaas does it here,
before the pod is bound, instead of in NodePrepareResources when the pod is already on
the node.

One round (:meth:`BindingWatcher.run_once`):

1. every claim allocated to a device of this driver in this node's pool whose devices
   carry binding conditions and have no verdict yet: activate the claim's partition(s)
   for the holder ``claim:<uid>`` (the same holder NodePrepareResources uses, so Prepare
   finds it active) and set ``gpucaas.dev/partition-active`` True on its devices, or, when
   the fabric refuses, ``gpucaas.dev/partition-failed`` True with the reason; while the
   fabric service is unreachable nothing is reported (the scheduler's timeout applies);
2. every fabric holder ``claim:<uid>`` that is neither prepared on this node (checkpoint)
   nor held by a claim still allocated here is released: a partition is never left
   active without a claim (e.g. after a failed binding deallocated the claim).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from core.dra import BINDING_CONDITION, BINDING_FAILURE_CONDITION, DRIVER
from core.fabric_client import FabricClient, FabricConflict, FabricRejected, FabricUnavailable
from core.kube import Conflict, Kube, KubeError, NotFound
from core.topology import partition_by_id
from services.dra_driver.checkpoint import Checkpoint
from services.dra_driver.driver import CLAIM_HOLDER_PREFIX, holder_for_claim
from services.dra_driver.slices import partition_of_device

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": _now(),
        "observedGeneration": generation,
    }


class BindingWatcher:
    def __init__(
        self,
        kube: Kube,
        fabric: FabricClient,
        checkpoint: Checkpoint,
        node_name: str,
        physical_to_pci: Mapping[int, str] | None = None,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.kube, self.fabric, self.checkpoint, self.node_name = kube, fabric, checkpoint, node_name
        self.physical_to_pci = physical_to_pci
        #: called when the fabric refused a claim's partition (the driver republishes its
        #: slices at once: a holder other than a claim may keep overlapping GPUs busy)
        self.on_refused = on_refused

    def _ours(self, claim: dict[str, Any]) -> list[dict[str, Any]]:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        return [r for r in results if r.get("driver") == DRIVER and r.get("pool") == self.node_name]

    def run_once(self) -> None:
        listing = self.kube.call(
            self.kube.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            idempotent=True,
            what="list ResourceClaims",
        )
        claims = cast("dict[str, Any]", listing)["items"]  # the custom-objects API answers plain JSON
        allocated_here: set[str] = set()
        for claim in claims:
            mine = self._ours(claim)
            if not mine:
                continue
            allocated_here.add(claim["metadata"]["uid"])
            if any(r.get("bindingConditions") for r in mine) and not self._decided(claim, mine):
                self._bind(claim, mine)
        self._release_orphans(allocated_here)

    def _decided(self, claim: dict[str, Any], mine: list[dict[str, Any]]) -> bool:
        verdicts = {
            (d.get("pool"), d.get("device")): {
                c["type"] for c in d.get("conditions") or [] if c.get("status") == "True"
            }
            for d in (claim.get("status") or {}).get("devices") or []
            if d.get("driver") == DRIVER
        }
        return all(
            verdicts.get((r["pool"], r["device"]), set()) & {BINDING_CONDITION, BINDING_FAILURE_CONDITION} for r in mine
        )

    def _bind(self, claim: dict[str, Any], mine: list[dict[str, Any]]) -> None:
        meta = claim["metadata"]
        pci = (
            self.physical_to_pci
            if self.physical_to_pci is not None
            else {g["physical_id"]: g["pci_bus_id"] for g in self.fabric.topology()["gpus"] if g["pci_bus_id"]}
        )
        gpus = [pci[g] for r in mine for g in partition_by_id(partition_of_device(r["device"])).sorted_gpus()]
        try:
            self.fabric.activate(holder_for_claim(meta["uid"]), gpus)
            kind, reason, message = BINDING_CONDITION, "PartitionActive", "NVLink partition active on " + self.node_name
        except (FabricConflict, FabricRejected) as exc:
            kind, reason, message = BINDING_FAILURE_CONDITION, "ActivationFailed", str(exc)
            if self.on_refused is not None:
                self.on_refused()
        except FabricUnavailable as exc:
            log.warning(
                "claim %s/%s: fabric service unavailable, no verdict yet: %s", meta["namespace"], meta["name"], exc
            )
            return
        status = dict(claim.get("status") or {})
        others = [
            d
            for d in status.get("devices") or []
            if not (d.get("driver") == DRIVER and d.get("pool") == self.node_name)
        ]
        status["devices"] = others + [
            {
                "driver": DRIVER,
                "pool": r["pool"],
                "device": r["device"],
                "conditions": [_condition(kind, reason, message, meta.get("generation", 0))],
            }
            for r in mine
        ]
        body = {**claim, "status": status}
        try:
            self.kube.call(
                self.kube.custom.replace_namespaced_custom_object_status,
                GROUP,
                VERSION,
                meta["namespace"],
                PLURAL,
                meta["name"],
                body,
                what=f"report {kind} on ResourceClaim {meta['namespace']}/{meta['name']}",
            )
            log.info("claim %s/%s: %s (%s)", meta["namespace"], meta["name"], kind, message)
        except (Conflict, NotFound) as exc:  # changed or gone meanwhile: the next round sees it again
            log.info("claim %s/%s: status not written (%s); next round", meta["namespace"], meta["name"], exc)

    def _release_orphans(self, allocated_here: set[str]) -> None:
        prepared = {c.uid for c in self.checkpoint.all()}
        for act in self.fabric.activations():
            holder = act.get("holder") or ""
            if not holder.startswith(CLAIM_HOLDER_PREFIX):
                continue
            uid = holder[len(CLAIM_HOLDER_PREFIX) :]
            if uid in prepared or uid in allocated_here:
                continue
            try:
                self.fabric.release(holder)
                log.info("released %s: no claim holds it any more", holder)
            except (FabricUnavailable, FabricRejected) as exc:
                log.warning("could not release %s: %s", holder, exc)


def run_round(watcher: BindingWatcher) -> None:
    """One round, logging (not raising) what Kubernetes or the fabric answered."""
    try:
        watcher.run_once()
    except (KubeError, FabricUnavailable) as exc:
        log.warning("binding round failed: %s", exc)
