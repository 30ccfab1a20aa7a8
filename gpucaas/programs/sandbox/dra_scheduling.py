"""DRA in the sandbox's stand-in scheduler: allocate a pod's ResourceClaims, then bind.

What kube-scheduler's DynamicResources plugin does (kubernetes
``pkg/scheduler/framework/plugins/dynamicresources``), reduced to what gpucaas uses:

* PreFilter: every claim of the pod must exist (the resourceclaim controller creates
  them from templates, :mod:`.claim_controller`); a claim already allocated pins the pod
  to its node;
* Filter: on each candidate node (in name order) the claims are allocated with the
  stand-in structured allocator (:mod:`gpucaas.devtools.dra_allocator`: first fit over
  the node's complete pools, counters, DeviceClass selectors) against every device
  already allocated to any claim, including the allocations this scheduler made and has
  not seen written back yet (its "assumed" cache);
* Reserve/PreBind: ``status.allocation`` (the devices, and a node selector on
  ``metadata.name``) and ``status.reservedFor`` (the pod) are written; when an allocated
  device carries ``bindingConditions`` (KEP-5007), the pod is bound only when the driver
  has set each of them True in ``status.devices[].conditions``; when one of its
  ``bindingFailureConditions`` is True, or ``binding_timeout_s`` passes, the claim is
  deallocated (allocation, reservedFor and device conditions cleared) and the pod goes
  back to the queue, with that node tried last on the next attempts;
* Bind: ``pods/binding``.

Unlike kube-scheduler, waiting does not block a binding goroutine: each scheduling pass
looks at the pods whose claims wait for conditions and binds or gives up on them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from gpucaas.core.kube import Conflict, Kube, NotFound
from gpucaas.devtools.dra_allocator import DeviceRef, Unsupported, allocate
from gpucaas.programs.sandbox.dra_kubelet import claim_name_of

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"


class NotYet(Exception):
    """The pod cannot be placed now; the message goes on its PodScheduled condition."""


@dataclass
class Waiting:
    node: str
    since: float
    claims: list[str]  # names, in the pod's namespace


@dataclass
class DraPlacer:
    kube: Kube
    binding_timeout_s: float = 60.0
    waiting: dict[str, Waiting] = field(default_factory=dict)  # pod uid ->
    avoid: dict[str, set[str]] = field(default_factory=dict)  # pod uid -> nodes whose binding failed
    assumed: dict[str, list[DeviceRef]] = field(default_factory=dict)  # claim uid -> devices

    @staticmethod
    def wants(pod: dict[str, Any]) -> bool:
        return bool(pod.get("spec", {}).get("resourceClaims"))

    # --- reads ------------------------------------------------------------------------
    def _list(self, plural: str) -> list[dict[str, Any]]:
        return self.kube.call(self.kube.custom.list_cluster_custom_object, GROUP, VERSION, plural,
                              idempotent=True, what=f"list {plural}")["items"]

    def _claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.kube.call(self.kube.custom.get_namespaced_custom_object, GROUP, VERSION, namespace,
                              "resourceclaims", name, idempotent=True, what=f"read ResourceClaim {namespace}/{name}")

    def _write_status(self, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        meta = claim["metadata"]
        return self.kube.call(self.kube.custom.replace_namespaced_custom_object_status, GROUP, VERSION,
                              meta["namespace"], "resourceclaims", meta["name"], {**claim, "status": status},
                              what=f"write the allocation of ResourceClaim {meta['namespace']}/{meta['name']}")

    def pod_claims(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        md = pod["metadata"]
        out = []
        for entry in pod["spec"]["resourceClaims"]:
            name = claim_name_of(pod, entry)
            if name is None:
                raise NotYet(f'waiting for the ResourceClaim of "{entry.get("name")}" to be created')
            try:
                out.append(self._claim(md["namespace"], name))
            except NotFound:
                raise NotYet(f'ResourceClaim "{name}" not found') from None
        return out

    # --- one pod ------------------------------------------------------------------------
    def place(self, pod: dict[str, Any], nodes: list[str]) -> tuple[str | None, str]:
        """The node to bind to now, or (None, why). May allocate and start waiting."""
        uid = pod["metadata"]["uid"]
        claims = self.pod_claims(pod)
        if uid in self.waiting:
            return self._check_waiting(pod, claims)
        pinned = {self._node_of(c) for c in claims if (c.get("status") or {}).get("allocation")}
        pinned.discard(None)
        if len(pinned) > 1:
            raise NotYet(f"claims allocated on different nodes: {sorted(pinned)}")  # type: ignore[arg-type]
        slices = self._list("resourceslices")
        classes = {c["metadata"]["name"]: c for c in self._list("deviceclasses")}
        all_claims = self._list("resourceclaims")
        live = {c["metadata"]["uid"] for c in all_claims}
        self.assumed = {k: v for k, v in self.assumed.items() if k in live}
        taken: set[DeviceRef] = set()
        for c in all_claims:
            results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            taken.update(DeviceRef(r["driver"], r["pool"], r["device"]) for r in results)
            if not results:
                taken.update(self.assumed.get(c["metadata"]["uid"], ()))
        todo = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        # nodes where binding failed come last: elsewhere first, but never starved of them
        avoid = self.avoid.get(uid, set())
        candidates = sorted(pinned) if pinned else [n for n in nodes if n not in avoid] + [n for n in nodes if n in avoid]
        why: list[str] = []
        for node in candidates:
            chosen: dict[str, list[Any]] = {}
            ok = True
            held = set(taken)
            for c in todo:
                try:
                    result = allocate(c, node, slices, classes, held)
                except (Unsupported, LookupError) as exc:
                    raise NotYet(f'ResourceClaim "{c["metadata"]["name"]}": {exc}') from None
                if result is None:
                    ok = False
                    why.append(f"{node}: cannot allocate all claims")
                    break
                chosen[c["metadata"]["uid"]] = result
                held.update(d.ref for d in result)
            if not ok:
                continue
            self._reserve(pod, claims, chosen, node)
            return self._check_waiting(pod, [self._claim(c["metadata"]["namespace"], c["metadata"]["name"])
                                              for c in claims])
        return None, f"0/{len(nodes)} nodes are available: " + ("; ".join(why) or "no candidate node")

    @staticmethod
    def _node_of(claim: dict[str, Any]) -> str | None:
        selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
        for term in selector.get("nodeSelectorTerms") or []:
            for f in term.get("matchFields") or []:
                if f.get("key") == "metadata.name" and f.get("values"):
                    return f["values"][0]
        return None

    def _reserve(self, pod: dict[str, Any], claims: list[dict[str, Any]], chosen: dict[str, list[Any]],
                 node: str) -> None:
        md = pod["metadata"]
        me = {"resource": "pods", "name": md["name"], "uid": md["uid"]}
        for c in claims:
            status = dict(c.get("status") or {})
            if c["metadata"]["uid"] in chosen:
                devices = chosen[c["metadata"]["uid"]]
                status["allocation"] = {
                    "devices": {"results": [d.as_result() for d in devices]},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                }
                if any(d.binding_conditions for d in devices):
                    status["allocation"]["allocationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != md["uid"]]
            status["reservedFor"] = [*reserved, me]
            self._write_status(c, status)  # Conflict: someone else wrote it; the pass retries
            if c["metadata"]["uid"] in chosen:
                self.assumed[c["metadata"]["uid"]] = [d.ref for d in chosen[c["metadata"]["uid"]]]
            log.info("allocated ResourceClaim %s/%s on %s: %s", md["namespace"], c["metadata"]["name"], node,
                     ", ".join(d.ref.device for d in chosen.get(c["metadata"]["uid"], [])) or "already allocated")
        self.waiting[md["uid"]] = Waiting(node, time.monotonic(), [c["metadata"]["name"] for c in claims])

    def _check_waiting(self, pod: dict[str, Any], claims: list[dict[str, Any]]) -> tuple[str | None, str]:
        uid = pod["metadata"]["uid"]
        wait = self.waiting[uid]
        pending: list[str] = []
        for c in claims:
            status = c.get("status") or {}
            results = (status.get("allocation") or {}).get("devices", {}).get("results") or []
            if not status.get("allocation"):
                self.waiting.pop(uid, None)
                return None, f'ResourceClaim "{c["metadata"]["name"]}" lost its allocation; scheduling again'
            true = {(d.get("driver"), d.get("pool"), d.get("device")):
                    {k["type"] for k in d.get("conditions") or [] if k.get("status") == "True"}
                    for d in status.get("devices") or []}
            for r in results:
                have = true.get((r["driver"], r["pool"], r["device"]), set())
                failed = have & set(r.get("bindingFailureConditions") or [])
                if failed:
                    return self._give_up(pod, claims, f"device {r['device']} reported {', '.join(sorted(failed))}")
                missing = set(r.get("bindingConditions") or []) - have
                if missing:
                    pending.append(f"{r['device']}: {', '.join(sorted(missing))}")
        if pending:
            if time.monotonic() - wait.since > self.binding_timeout_s:
                return self._give_up(pod, claims, f"binding conditions not met within {self.binding_timeout_s:.0f}s "
                                                  f"({'; '.join(pending)})")
            return None, f"waiting for binding conditions on {wait.node}: {'; '.join(pending)}"
        self.waiting.pop(uid, None)
        self.avoid.pop(uid, None)
        return wait.node, "claims allocated" + (" and their binding conditions met" if claims else "")

    def _give_up(self, pod: dict[str, Any], claims: list[dict[str, Any]], why: str) -> tuple[None, str]:
        """Deallocate (as the scheduler's Unreserve after a failed PreBind) and try again elsewhere."""
        uid = pod["metadata"]["uid"]
        wait = self.waiting.pop(uid)
        self.avoid.setdefault(uid, set()).add(wait.node)
        for c in claims:
            status = dict(c.get("status") or {})
            for k in ("allocation", "devices"):
                status.pop(k, None)
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
            if reserved:
                status["reservedFor"] = reserved
            else:
                status.pop("reservedFor", None)
            try:
                self._write_status(c, status)
            except (Conflict, NotFound):
                pass
            self.assumed.pop(c["metadata"]["uid"], None)
        log.warning("pod %s/%s: binding on %s failed, claims deallocated: %s", pod["metadata"]["namespace"],
                    pod["metadata"]["name"], wait.node, why)
        return None, f"binding on {wait.node} failed, claims deallocated: {why}"
