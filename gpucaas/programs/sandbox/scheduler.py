"""The sandbox's stand-in for kube-scheduler: binds pending pods, asking the extender.

A real cluster runs kube-scheduler configured with the gpucaas extender
(deploy/scheduler/). The sandbox has no kube-scheduler, so this loop plays its
part for GPU pods: it lists the candidate nodes, sends the scheduler extender
the same ``filter`` and ``prioritize`` requests kube-scheduler would (the
extender's HTTP JSON protocol), and binds the pod to the best node through the
extender's ``bind`` verb (pods without GPUs through pods/binding). Pods that fit
nowhere stay Pending with a
``PodScheduled=False`` condition, retried as capacity frees up.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
from kubernetes import client

from gpucaas.core.kube import Conflict, Kube, KubeError, NotFound
from gpucaas.programs.sandbox import pod_wakeup
from gpucaas.programs.sandbox.dra_scheduling import DraPlacer, NotYet
from services.placement.errors import PlacementError
from services.placement.extender import pod_gpu_count

log = logging.getLogger(__name__)

GPU_NODE_LABEL = "gpucaas.dev/gpu-node"



class SandboxScheduler:
    def __init__(
        self,
        api: client.ApiClient,
        extender_url: str | None,
        resource_name: str = "nvidia.com/gpu",
        scheduler_name: str = "default-scheduler",
        retry_seconds: float = 2.0,
        dra: DraPlacer | None = None,
    ) -> None:
        self.kube = Kube.of(api)  # the core adapter: its timeouts and one error tree
        self.core = self.kube.core
        self.api = self.kube.api_client
        self.extender_url = extender_url.rstrip("/") if extender_url else None
        self.resource = resource_name
        self.scheduler_name = scheduler_name
        self.retry_seconds = retry_seconds
        self.http = httpx.Client(timeout=10)
        self.dra = dra  # the "dra" allocation mode: pods with resourceClaims are placed by their claims
        self._stop = threading.Event()

    # --- one decision ---------------------------------------------------------
    def candidate_nodes(self) -> list[dict[str, Any]]:
        nodes = self.api.sanitize_for_serialization(
            self.core.list_node(label_selector=f"{GPU_NODE_LABEL}=true").items
        )
        ready = []
        for n in nodes:
            conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
            if conds.get("Ready") == "True" and not n.get("spec", {}).get("unschedulable"):
                ready.append(n)
        return ready

    def choose_node(self, pod: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> tuple[str | None, str]:
        nodes = self.candidate_nodes() if nodes is None else nodes
        if not nodes:
            return None, "no Ready GPU node"
        names = sorted(n["metadata"]["name"] for n in nodes)
        if self.dra is not None and self.dra.wants(pod):
            try:
                return self.dra.place(pod, self.by_extender_score(pod, names))
            except NotYet as exc:
                return None, str(exc)
        if pod_gpu_count(pod, self.resource) == 0 or self.extender_url is None:
            return names[0], "no GPUs requested"
        args = {"Pod": pod, "Nodes": None, "NodeNames": names}
        resp = self.http.post(f"{self.extender_url}/filter", json=args)
        resp.raise_for_status()
        result = resp.json()
        if result.get("Error"):
            return None, f"extender filter error: {result['Error']}"
        fitting = result.get("NodeNames") or []
        if not fitting:
            failed = {**(result.get("FailedNodes") or {}), **(result.get("FailedAndUnresolvableNodes") or {})}
            why = "; ".join(f"{n}: {r}" for n, r in sorted(failed.items())) or "no node fits"
            return None, f"0/{len(names)} nodes fit: {why}"
        resp = self.http.post(
            f"{self.extender_url}/prioritize", json={"Pod": pod, "Nodes": None, "NodeNames": fitting}
        )
        resp.raise_for_status()
        scores = {h["Host"]: h["Score"] for h in resp.json() or []}
        best = max(fitting, key=lambda n: (scores.get(n, 0), [-ord(ch) for ch in n]))
        return best, f"extender score {scores.get(best, 0)} among {len(fitting)} fitting node(s)"

    def by_extender_score(self, pod: dict[str, Any], names: list[str]) -> list[str]:
        """``names``, best first by the extender's ``prioritize`` (a prioritize-only extender,
        as the chart configures it in the DRA mode): kube-scheduler adds the extender's
        scores to its own and reserves the claim's devices on the best node where the
        DynamicResources plugin found them allocatable, which is the first node of this
        order where the stand-in allocator fits the claims."""
        if self.extender_url is None or pod_gpu_count(pod, self.resource) == 0:
            return names
        try:
            resp = self.http.post(f"{self.extender_url}/prioritize",
                                  json={"Pod": pod, "Nodes": None, "NodeNames": names})
            resp.raise_for_status()
            scores = {h["Host"]: h["Score"] for h in resp.json() or []}
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            # ignorable: true (deploy/scheduler/kube-scheduler-config-dra.yaml): kube-scheduler
            # goes on without an extender that fails; the claims are still allocated correctly
            log.warning("extender prioritize failed, placing without its scores: %s", exc)
            return names
        ordered = sorted(names, key=lambda n: (-scores.get(n, 0), n))
        log.debug("extender scores for %s/%s: %s", pod["metadata"].get("namespace"), pod["metadata"].get("name"),
                  ", ".join(f"{n}={scores.get(n, 0)}" for n in ordered))
        return ordered

    def bind(self, pod: dict[str, Any], node: str) -> None:
        """Bind through the extender for GPU pods (its bindVerb, as kube-scheduler does), so it
        counts the pod's GPUs the moment it binds rather than when its pod watch catches up.
        Pods with DRA claims are bound by the scheduler itself (the extender has no bind verb
        in the DRA mode: the claims' allocation is written before the Binding)."""
        md = pod["metadata"]
        by_claims = self.dra is not None and self.dra.wants(pod)
        if self.extender_url is not None and not by_claims and pod_gpu_count(pod, self.resource) > 0:
            resp = self.http.post(f"{self.extender_url}/bind", json={
                "PodName": md["name"], "PodNamespace": md["namespace"], "PodUID": md.get("uid", ""), "Node": node})
            resp.raise_for_status()
            error = (resp.json() or {}).get("Error")
            if error:
                raise Conflict(f"extender bind: {error}", status=409)
            return
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": md["name"], "namespace": md["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # _preload_content=False: the client's V1Binding response model rejects the
        # Status object the API server answers with (kubernetes-client/python#825).
        self.kube.call(self.core.create_namespaced_binding, md["namespace"], body, _preload_content=False,
                       what=f"bind pod {md['namespace']}/{md['name']} to {node}")

    def mark_unschedulable(self, pod: dict[str, Any], message: str) -> None:
        """Set ``PodScheduled=False, Unschedulable`` with ``message``, unless the pod says so
        already: as kube-scheduler (``UpdatePodCondition`` in pkg/api/v1/pod/util.go reports no
        change when only the times differ), so a backlog of pods that fit nowhere does not turn
        every scheduling pass into a status write per pod, each waking the next pass."""
        md = pod["metadata"]
        current = pod.get("status", {}).get("conditions", []) or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               and c.get("message") == message for c in current):
            return
        conds = [c for c in current if c.get("type") != "PodScheduled"]
        conds.append({
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })
        try:
            self.kube.call(self.core.patch_namespaced_pod_status, md["name"], md["namespace"],
                           {"status": {"conditions": conds}}, idempotent=True)
        except NotFound:
            pass

    def schedule_one(self, pod: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> bool:
        """Place one pod; ``nodes``: the candidate nodes if the caller has listed them this pass."""
        md = pod["metadata"]
        try:
            node, why = self.choose_node(pod, nodes)
        except PlacementError as exc:  # a malformed GPU request: say so on the pod
            node, why = None, str(exc)
        if node is None:
            log.info("pod %s/%s unschedulable: %s", md["namespace"], md["name"], why)
            self.mark_unschedulable(pod, why)
            return False
        try:
            self.bind(pod, node)
        except (NotFound, Conflict):  # deleted, or bound meanwhile
            return False
        log.info("bound pod %s/%s to %s (%s)", md["namespace"], md["name"], node, why)
        return True

    # --- loop -------------------------------------------------------------------
    def pending_pods(self) -> list[dict[str, Any]]:
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=,status.phase=Pending")
        out = []
        for p in self.api.sanitize_for_serialization(pods.items):
            if p["metadata"].get("deletionTimestamp"):
                continue
            if p["spec"].get("schedulerName", "default-scheduler") != self.scheduler_name:
                continue
            out.append(p)
        return sorted(out, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def run(self) -> None:
        """Schedule until stopped: on every pod or node event, and every retry period."""
        wake = threading.Event()
        pod_wakeup.start(self.core, wake, self._stop)
        while not self._stop.is_set():
            try:
                pending = self.pending_pods()
                nodes = self.candidate_nodes() if pending else []  # once per pass, not once per pod
                for pod in pending:
                    self.schedule_one(pod, nodes)
            except KubeError as exc:  # "forbidden: <user> cannot ..." or "Kubernetes unreachable at ..."
                log.warning("scheduling pass failed, retrying: %s", exc.summary())
            except (client.ApiException, httpx.HTTPError, OSError) as exc:
                log.warning("scheduling pass failed, retrying: %s", exc)
            wake.wait(self.retry_seconds)
            wake.clear()

    def stop(self) -> None:
        self._stop.set()
