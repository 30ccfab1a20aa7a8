"""The sandbox node agent: plays a GPU node's kubelet, the way kwok does, but with real devices.

What a kubelet does for a gpucaas pod, it does over the same protocols:
* keeps the Node object (labels, Ready condition, ``nvidia.com/gpu`` capacity and
  allocatable from the device plugin's ListAndWatch stream);
* is the device plugins' kubelet: a real v1beta1 Registration server on
  ``<kubelet-dir>/device-plugins/kubelet.sock`` and a PodResources server
  (``devtools.fake_kubelet``);
* admits each pod bound to the node: GetPreferredAllocation, Allocate (the device
  plugin activates the NVLink partition through the fabric service), records the
  allocation in a checkpoint file (as the kubelet's ``kubelet_internal_checkpoint``),
  and reports the CDI devices in an Event;
* "runs" the container: marks it Running, writes a log that says plainly that nothing
  ran and what the control plane handed over (GPUs, CDI devices, NVLink), and after the run time (``sleep N`` in the
  command, else a default) marks it Succeeded — or Failed on ``activeDeadlineSeconds``;
* serves that log as the kubelet does, on ``/containerLogs/...`` over HTTPS
  (:mod:`devtools.container_logs`) at the address and port its Node status names,
  so ``kubectl logs`` and the API read it through kube-apiserver;
* frees the devices when the pod terminates or is deleted, and completes deletion.
No container or VM really runs: that is the simulated part.

Waiting, as the kubelet does, on conditions rather than against fixed deadlines: pod
admission runs on its own worker (the kubelet's pod workers), so the pod watch keeps
delivering deletions while an admission waits; an admission waits for the device plugin
to register and for its devices to be reported healthy for as long as the pod is still
wanted here (not deleted) and says every ``WAIT_REPORT_S`` that it still waits; the
plugin's Allocate has no deadline (the kubelet's device manager calls it with
``context.Background()``, pkg/kubelet/cm/devicemanager). Under CPU contention these steps
get slower, never abandoned (docs/sandbox.md).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from core.kube import Conflict, Kube, KubeError, NotFound, Unavailable
from devtools.container_logs import ContainerLogServer, LogBook
from devtools.fake_kubelet import AdmissionError, Allocation, FakeKubelet, PluginConnection
from gpucaas.sandbox.dra_kubelet import ClaimInfo, DraKubelet, PrepareFailed
from services.device_plugin.api import dp_pb2
from services.placement.extender import extended_resource_gpus

log = logging.getLogger(__name__)

CHECKPOINT = "node_agent_checkpoint.json"
#: the label the chart's RuntimeClass and DaemonSets select GPU nodes by
GPU_NODE_LABEL = "gpucaas.dev/gpu-node"
#: what a GPU node of the sandbox carries beside the kubelet's own labels
GPU_NODE_LABELS = {
    GPU_NODE_LABEL: "true",
    "node.kubernetes.io/instance-type": "hgx-h100-8",
    # as NVIDIA GPU Feature Discovery labels an H100 SXM node (usage records read it)
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
}
WAIT_REPORT_S = 30.0  # an admission still waiting says so this often (and keeps waiting)
WAIT_STEP_S = 1.0  # how often a waiting admission checks that its pod is still wanted


class Abandoned(Exception):  # not an error: the pod went away or the agent stops
    """The pod being admitted was deleted (or the agent stops): stop waiting for it."""


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_seconds_of(pod: dict[str, Any], default: float) -> float:
    """A container whose command is ``sleep N`` (or ``sh -c "sleep N"``) runs N seconds."""
    for c in pod.get("spec", {}).get("containers", []):
        words = " ".join([*(c.get("command") or []), *(c.get("args") or [])])
        m = re.search(r"\bsleep\s+(\d+(?:\.\d+)?)", words)
        if m:
            return float(m.group(1))
    return default


def simulated_log(
    pod: dict[str, Any], alloc: Allocation | None, node: str, claims: list[ClaimInfo] | None = None
) -> str:
    """What the sandbox writes as the container's log: no image runs here, so it prints no
    program output, only what the control plane really did for the pod."""
    image = pod["spec"]["containers"][0].get("image", "")
    lines = [f"[gpucaas sandbox] SIMULATED: no container runs in the sandbox; {image} was not pulled or started."]
    if alloc is not None or not claims:
        devices = list(alloc.device_ids) if alloc else []
        cdi = [d.name for d in alloc.response.cdi_devices] if alloc else []
        nvlink = alloc.response.envs.get("GPUCAAS_NVLINK", "false") if alloc else "false"
        lines.append(
            f"[gpucaas sandbox] node {node}: {len(devices)} GPU(s) allocated by the device plugin, NVLink {nvlink}."
        )
        lines += [
            f"[gpucaas sandbox]   GPU {bdf} -> CDI device {cdi[i] if i < len(cdi) else '-'}"
            for i, bdf in enumerate(devices)
        ]
    for c in claims or []:
        # One partition device holding several GPUs is an NVLink partition; several devices
        # are single-GPU partitions (a size that is no partition on the board).
        nvlink = "true" if len(c.devices) == 1 and len(c.cdi_ids) > 1 else "false"
        lines.append(
            f"[gpucaas sandbox] node {node}: {len(c.cdi_ids)} GPU(s) allocated by the DRA driver "
            f"(ResourceClaim {c.name}: {', '.join(c.devices)}), NVLink {nvlink}."
        )
        lines += [f"[gpucaas sandbox]   GPU {cdi_id.split('=', 1)[-1]} -> CDI device {cdi_id}" for cdi_id in c.cdi_ids]
    return "\n".join(lines) + "\n"


@dataclass
class Running:
    namespace: str
    name: str
    uid: str
    finish_at: float
    deadline_at: float | None


class NodeAgent:
    def __init__(
        self,
        api: client.ApiClient,
        node_name: str,
        kubelet_dir: Path,
        resource_name: str = "nvidia.com/gpu",
        default_run_seconds: float = 3.0,
        status_interval: float = 1.0,
        dra: DraKubelet | None = None,
        client_ca: Path | None = None,
    ) -> None:
        self.kube = Kube.of(api)  # the core adapter: its timeouts and one error tree
        self.api = self.kube.api_client
        self.core = self.kube.core
        self.node = node_name
        self.dir = Path(kubelet_dir)
        self.resource = resource_name
        self.default_run_seconds = default_run_seconds
        self.status_interval = status_interval
        self.dra = dra  # the kubelet's DRA side, in the "dra" allocation mode
        self.kubelet = FakeKubelet(self.dir / "device-plugins", self.dir / "pod-resources" / "kubelet.sock")
        self._running: dict[str, Running] = {}
        self._handled: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Pods bound here and waiting for admission, in arrival order; one worker admits them
        # one at a time (device choice must see the previous allocation), off the watch thread.
        self._pending: dict[str, dict[str, Any]] = {}
        self._admissions: queue.Queue[str] = queue.Queue()
        # the kubelet's log endpoint: kube-apiserver connects with a client certificate of the cluster's CA
        self.logs = LogBook(self.dir / "pod-logs")
        self._client_ca = client_ca
        self.log_server: ContainerLogServer | None = None

    # --- node object -----------------------------------------------------------------
    def _live_plugin(self) -> PluginConnection | None:
        """The registered plugin, unless its ListAndWatch stream ended (it went away)."""
        conn = self.kubelet.plugins.get(self.resource)
        return conn if conn is not None and not conn.stream_ended else None

    def _healthy_devices(self) -> list[str]:
        conn = self._live_plugin()
        return conn.healthy() if conn else []

    def _waiting(self, what: str, done: Callable[[], bool], wanted: Callable[[], bool]) -> None:
        """Until ``done()``: checked every WAIT_STEP_S (``done`` itself blocks on a condition for
        up to that long), reported every WAIT_REPORT_S, given up only when the pod is no longer
        wanted. No fixed deadline: on a loaded machine a step takes longer, it does not fail."""
        started = last_report = time.monotonic()
        while not done():
            if not wanted():
                raise Abandoned(what)
            now = time.monotonic()
            if now - last_report >= WAIT_REPORT_S:
                log.warning("still waiting for %s (%.0fs)", what, now - started)
                last_report = now

    def _wait_for_live_plugin(self, wanted: Callable[[], bool]) -> Any:  # a PluginConnection
        """After a restart of the plugin or of this agent, wait for the plugin to register again
        and send its first device list; the live connection."""
        conn = self.kubelet.plugins.get(self.resource)
        if conn is not None and not conn.stream_ended and conn.updates > 0:
            return conn

        def registrations() -> int:
            return sum(r.resource_name == self.resource for r in self.kubelet.registrations)

        # A connection whose stream ended is gone: the next registration is the live one.
        want = registrations() + 1 if conn is not None and conn.stream_ended else max(1, registrations())
        found: list[Any] = []

        def registered() -> bool:
            nonlocal want
            try:
                found.append(self.kubelet.wait_for_plugin(self.resource, registrations=want, timeout=WAIT_STEP_S))
            except TimeoutError:
                pass
            if found and not found[-1].stream_ended:
                return True
            current = self.kubelet.plugins.get(self.resource)
            if current is not None and current.stream_ended:  # gone again: wait for the next one
                want = registrations() + 1
            return False

        self._waiting(f"the {self.resource} device plugin to register", registered, wanted)
        return found[-1]

    def _wait_for_devices(self, count: int, wanted: Callable[[], bool]) -> Any:
        """The extender binds by partitions and leases, not by the kubelet's device health, so a
        pod can be bound a moment before its GPUs are reported Healthy again (a lease checked
        and Free, the next ListAndWatch update not yet sent): wait for that update. Returns the
        live connection; starts over if the plugin goes away meanwhile."""
        while True:
            conn = self._wait_for_live_plugin(wanted)

            def enough(c: Any = conn) -> bool:
                return c.stream_ended or len(set(c.healthy()) - self.kubelet.allocated_ids(self.resource)) >= count

            self._waiting(
                f"{count} healthy unallocated {self.resource}",
                partial(conn.wait_for, enough, timeout=WAIT_STEP_S),
                wanted,
            )
            if not conn.stream_ended:
                return conn

    def _admit_devices(self, pod: dict[str, Any], count: int, wanted: Callable[[], bool]) -> Allocation:
        md = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        delay, told = 0.5, False
        while True:
            conn = self._wait_for_devices(count, wanted)
            try:
                # No deadline on the plugin's calls, as the kubelet's device manager: a dead plugin
                # ends the call with UNAVAILABLE, a slow one is waited for.
                return self.kubelet.admit(
                    md["namespace"], md["name"], self.resource, count, container=container, timeout=None
                )
            except AdmissionError as exc:
                unavailable = "UNAVAILABLE" in str(exc)
                stale = "FAILED_PRECONDITION" in str(exc) and "unhealthy" in str(exc)
                if not (unavailable or stale):
                    raise
                # UNAVAILABLE: the plugin died under us, or a service it needs (the fabric service,
                # restarting) did not answer. Unhealthy: the plugin refused a device it has marked
                # unhealthy since its last ListAndWatch update reached us (a GPU lease just left
                # Free; a loaded machine widens that window). Both are retried with back-off once
                # the plugin has had time to say more: a dead plugin's stream ends and
                # _wait_for_devices waits for its return; a newer device list changes the choice.
                updates = conn.updates
                log.warning(
                    "Allocate for %s/%s refused, retrying in %.1fs: %s", md["namespace"], md["name"], delay, exc
                )
                if not told:
                    self._event(pod, "AllocateRetrying", f"{exc}; retrying", "Warning")
                    told = True

                def said_more(c: PluginConnection, stale: bool = stale, updates: int = updates) -> bool:
                    return c.stream_ended or (stale and c.updates > updates)

                conn.wait_for(said_more, timeout=delay)
                if not wanted():
                    raise Abandoned("Allocate") from exc
                delay = min(delay * 2, 5.0)

    def _all_devices(self) -> list[str]:
        conn = self.kubelet.plugins.get(self.resource)
        return sorted(conn.health()) if conn else []

    def ensure_node(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node,
                "labels": {
                    "kubernetes.io/hostname": self.node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **GPU_NODE_LABELS,
                },
            },
            "spec": {},
        }
        delay = 0.5
        while True:  # the API server may be slow to answer on a loaded machine: retry, never give up
            try:
                self.kube.call(self.core.create_node, body, what=f"register node {self.node}")
            except Conflict:
                pass
            except Unavailable as exc:
                if self._stop.is_set():
                    return
                log.warning("registering node %s failed, retrying in %.1fs: %s", self.node, delay, exc.summary())
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            break
        try:
            self.update_node_status()
        except Exception as exc:  # noqa: BLE001 (the status loop posts it again every status_interval)
            log.warning("node status update failed: %s", exc)

    def update_node_status(self) -> None:
        devices = self._all_devices()
        healthy = self._healthy_devices()
        registered = self.resource in self.kubelet.plugins
        status = {
            # an HGX H100 node as the chart's sizing expects it: 1 GiB hugepages reserved for the
            # Kata VMs' memory (8 x 224Gi)
            "capacity": {
                "cpu": "224",
                "memory": "2Ti",
                "hugepages-1Gi": "1800Gi",
                "pods": "110",
                self.resource: str(len(devices)),
            },
            "allocatable": {
                "cpu": "220",
                "memory": "1900Gi",
                "hugepages-1Gi": "1800Gi",
                "pods": "110",
                self.resource: str(len(healthy)),
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "gpucaas sandbox node agent is posting ready status"
                    + ("" if registered else "; no device plugin registered yet"),
                    "lastHeartbeatTime": now_iso(),
                    "lastTransitionTime": self._ready_since,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.node}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_server.port if self.log_server else 0}},
            "nodeInfo": {
                "kubeletVersion": "v1.31.0-gpucaas-sandbox",
                "containerRuntimeVersion": "containerd://1.7 (kata, simulated)",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "gpucaas sandbox",
                "kernelVersion": os.uname().release,
                "kubeProxyVersion": "",
                "machineID": self.node,
                "systemUUID": self.node,
                "bootID": self.node,
            },
        }
        self.core.patch_node_status(self.node, {"status": status})
        marker = self.dir / "registered"
        if registered and devices:
            marker.write_text(json.dumps({"resource": self.resource, "devices": devices}))
        if self.dra is not None and self.dra.plugins:
            (self.dir / "dra-registered").write_text(json.dumps(sorted(self.dra.plugins)))
        elif self.dra is not None:
            (self.dir / "dra-registered").unlink(missing_ok=True)

    # --- checkpoint (restart safety) ---------------------------------------------------
    def _save_checkpoint(self) -> None:
        data = [
            {
                "namespace": a.namespace,
                "pod": a.pod,
                "container": a.container,
                "resource": a.resource_name,
                "devices": list(a.device_ids),
                "cdi": [d.name for d in a.response.cdi_devices],
            }
            for a in self.kubelet.allocations
        ]
        tmp = self.dir / (CHECKPOINT + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.dir / CHECKPOINT)

    def _restore_checkpoint(self) -> None:
        path = self.dir / CHECKPOINT
        if not path.exists():
            return
        for a in json.loads(path.read_text()):
            resp = dp_pb2.ContainerAllocateResponse(cdi_devices=[dp_pb2.CDIDevice(name=n) for n in a["cdi"]])
            self.kubelet.allocations.append(
                Allocation(a["namespace"], a["pod"], a["container"], a["resource"], tuple(a["devices"]), resp, None)
            )
        log.info("restored %d allocation(s) from the checkpoint", len(self.kubelet.allocations))

    # --- pods --------------------------------------------------------------------------
    def _event(self, pod: dict[str, Any], reason: str, message: str, etype: str = "Normal") -> None:
        md = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": md["name"],
                "namespace": md["namespace"],
                "uid": md.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": "kubelet", "host": self.node},
            "firstTimestamp": now_iso(),
            "lastTimestamp": now_iso(),
            "count": 1,
        }
        try:
            self.kube.call(self.core.create_namespaced_event, md["namespace"], body, what="create event")
        except KubeError as exc:
            log.debug("event for %s/%s not recorded: %s", md["namespace"], md["name"], exc.summary())

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        md = pod["metadata"]
        try:
            self.kube.call(
                self.core.patch_namespaced_pod_status,
                md["name"],
                md["namespace"],
                {"status": status},
                what=f"patch pod {md['namespace']}/{md['name']} status",
                idempotent=True,
            )
        except NotFound:
            pass

    def _append_log(self, pod: dict[str, Any], text: str) -> None:
        """The simulated output, served on the node's log endpoint."""
        md = pod["metadata"]
        self.logs.append(md["namespace"], md["name"], pod["spec"]["containers"][0]["name"], text)

    def _end_logs(self, namespace: str, name: str) -> None:
        """The container exited: a followed log ends."""
        self.logs.end_pod(namespace, name)

    def _container_status(self, pod: dict[str, Any], state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
        c = pod["spec"]["containers"][0]
        return [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": ready,
                "state": state,
                "containerID": f"kata://{pod['metadata'].get('uid', '')[:12]}",
            }
        ]

    def admit(self, pod: dict[str, Any], wanted: Callable[[], bool] = lambda: True) -> None:
        md = pod["metadata"]
        key = f"{md['namespace']}/{md['name']}"
        count = extended_resource_gpus(pod, self.resource)  # the device manager's count; claims go to DRA
        alloc: Allocation | None = next(
            (a for a in self.kubelet.allocations if (a.namespace, a.pod) == (md["namespace"], md["name"])), None
        )
        if count and alloc is None:
            try:
                alloc = self._admit_devices(pod, count, wanted)
            except AdmissionError as exc:
                log.warning("admission of %s failed: %s", key, exc)
                self._event(pod, "UnexpectedAdmissionError", str(exc), "Warning")
                self._patch_status(
                    pod,
                    {"phase": "Failed", "reason": "UnexpectedAdmissionError", "message": f"Pod was rejected: {exc}"},
                )
                return
            self._save_checkpoint()
            cdi = ", ".join(d.name for d in alloc.response.cdi_devices)
            why = f" (preferred: {', '.join(alloc.preferred)})" if alloc.preferred else ""
            self._event(
                pod, "DevicesAllocated", f"{self.resource}: {', '.join(alloc.device_ids)}{why}; CDI devices: {cdi}"
            )
        claims = None
        if self.dra is not None and self.dra.has_claims(pod):
            claims = self._prepare_claims(pod, wanted)
            if claims is None:
                return
        started = now_iso()
        self._event(pod, "Started", "Started container in a Kata micro-VM (simulated)")
        self._patch_status(
            pod,
            {
                "phase": "Running",
                "hostIP": "192.0.2.10",
                "podIP": "10.244.0.10",
                "startTime": started,
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": started}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ],
                "containerStatuses": self._container_status(pod, {"running": {"startedAt": started}}, True),
            },
        )
        deadline = pod["spec"].get("activeDeadlineSeconds")
        now = time.monotonic()
        with self._lock:
            self._running[key] = Running(
                md["namespace"],
                md["name"],
                md.get("uid", ""),
                now + run_seconds_of(pod, self.default_run_seconds),
                now + float(deadline) if deadline else None,
            )
        self._wake.set()
        self._append_log(pod, simulated_log(pod, alloc, self.node, claims))

    def _prepare_claims(self, pod: dict[str, Any], wanted: Callable[[], bool]) -> list[ClaimInfo] | None:
        """The kubelet's PrepareResources, retried with back-off for as long as the pod is wanted
        here, as the kubelet's pod workers retry it (pkg/kubelet/cm/dra/manager.go returns the
        error and the pod worker syncs the pod again): no fixed give-up, which a loaded node
        would hit. None when the pod went away meanwhile."""
        assert self.dra is not None
        delay, reported = 0.5, False
        while True:
            try:
                claims = self.dra.prepare_pod(pod)
                break
            except PrepareFailed as exc:
                if not wanted() or self._stop.is_set():
                    return None
                log.info(
                    "claims of %s/%s not prepared yet: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], exc
                )
                if not reported and delay >= 4.0:  # one Warning, as the kubelet's FailedPrepareDynamicResources
                    self._event(pod, "FailedPrepareDynamicResources", str(exc), "Warning")
                    reported = True
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
                try:  # the controller may have written resourceClaimStatuses meanwhile
                    pod = self.kube.json(
                        self.core.read_namespaced_pod,
                        pod["metadata"]["name"],
                        pod["metadata"]["namespace"],
                        idempotent=True,
                    )
                except NotFound:
                    return None
        devices = "; ".join(f"{c.name}: {', '.join(c.devices)} (CDI devices: {', '.join(c.cdi_ids)})" for c in claims)
        self._event(pod, "ResourcesPrepared", f"DRA claims prepared: {devices}")
        return claims

    def release(self, namespace: str, name: str) -> None:
        if self.dra is not None:
            unprepared = self.dra.unprepare_pod(namespace, name)
            if unprepared:
                log.info("unprepared the claims of %s/%s: %s", namespace, name, ", ".join(unprepared))
        before = len(self.kubelet.allocations)
        self.kubelet.remove_pod(namespace, name)
        if len(self.kubelet.allocations) != before:
            self._save_checkpoint()
            log.info("released the devices of %s/%s", namespace, name)

    def finish(self, run: Running, deadline: bool) -> None:
        try:
            pod = self.kube.json(self.core.read_namespaced_pod, run.name, run.namespace, idempotent=True)
        except NotFound:
            self.release(run.namespace, run.name)
            return
        finished = now_iso()
        started = (pod.get("status") or {}).get("startTime") or finished
        if deadline:
            term = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "DeadlineExceeded",
                    "startedAt": started,
                    "finishedAt": finished,
                }
            }
            status: dict[str, Any] = {
                "phase": "Failed",
                "reason": "DeadlineExceeded",
                "message": "Pod was active on the node longer than the specified deadline",
            }
        else:
            term = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": finished}}
            status = {"phase": "Succeeded"}
        status["conditions"] = [
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}
        ]
        status["containerStatuses"] = self._container_status(pod, term, False)
        self._end_logs(run.namespace, run.name)
        self._patch_status(pod, status)
        self.release(run.namespace, run.name)

    def on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        key = f"{md['namespace']}/{md['name']}"
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if event_type == "DELETED":
            with self._lock:
                self._running.pop(key, None)
                self._pending.pop(key, None)
                self._handled.discard(key)
            self.release(md["namespace"], md["name"])
            self.logs.forget(md["namespace"], md["name"])
            return
        if md.get("deletionTimestamp"):
            with self._lock:
                self._running.pop(key, None)
                self._pending.pop(key, None)
            self.release(md["namespace"], md["name"])
            self._end_logs(md["namespace"], md["name"])
            if not md.get("finalizers"):
                try:  # the containers are stopped: complete the graceful deletion, as the kubelet does
                    self.kube.call(
                        self.core.delete_namespaced_pod,
                        md["name"],
                        md["namespace"],
                        grace_period_seconds=0,
                        idempotent=True,
                    )
                except NotFound:
                    pass
            return
        if phase in ("Succeeded", "Failed"):
            with self._lock:
                self._running.pop(key, None)
                self._pending.pop(key, None)
            self.release(md["namespace"], md["name"])
            self._end_logs(md["namespace"], md["name"])
            return
        with self._lock:
            if key in self._handled:
                return
            self._handled.add(key)
        if phase == "Pending":
            with self._lock:
                self._pending[key] = pod
            self._admissions.put(key)
        elif phase == "Running":  # after a restart: keep running from where it was
            alloc_known = any((a.namespace, a.pod) == (md["namespace"], md["name"]) for a in self.kubelet.allocations)
            log.info("resuming %s (devices %s)", key, "restored" if alloc_known else "none")
            started = (pod.get("status") or {}).get("startTime")
            elapsed = 0.0
            if started:
                elapsed = (
                    dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
                ).total_seconds()
            now = time.monotonic()
            deadline = pod["spec"].get("activeDeadlineSeconds")
            with self._lock:
                self._running[key] = Running(
                    md["namespace"],
                    md["name"],
                    md.get("uid", ""),
                    now + max(0.0, run_seconds_of(pod, self.default_run_seconds) - elapsed),
                    now + max(0.0, float(deadline) - elapsed) if deadline else None,
                )
            self._wake.set()

    # --- loops ------------------------------------------------------------------------
    def _wanted(self, key: str) -> bool:
        with self._lock:
            return key in self._pending and not self._stop.is_set()

    def _admit_pods(self) -> None:
        """The admission worker: admits the pods bound here one at a time, in arrival order. A
        failure other than an admission error (the Kubernetes API not answering, say) is retried
        with back-off for as long as the pod is wanted; a deleted pod is dropped."""
        while not self._stop.is_set():
            try:
                key = self._admissions.get(timeout=WAIT_STEP_S)
            except queue.Empty:
                continue
            delay = 0.5
            while self._wanted(key):
                with self._lock:
                    pod = self._pending.get(key)
                if pod is None:  # deleted meanwhile
                    break
                try:
                    self.admit(pod, wanted=partial(self._wanted, key))
                    break
                except Abandoned as exc:
                    log.info("stopped admitting %s (no longer wanted here) while waiting for %s", key, exc)
                    break
                except Exception as exc:  # noqa: BLE001 (retried: an admission is never dropped silently)
                    log.warning("admitting %s failed, retrying in %.1fs: %s", key, delay, exc)
                    self._stop.wait(delay)
                    delay = min(delay * 2, 10.0)
            with self._lock:
                self._pending.pop(key, None)

    def _watch_pods(self) -> None:
        selector = f"spec.nodeName={self.node}"
        while not self._stop.is_set():
            try:
                listing = self.core.list_pod_for_all_namespaces(field_selector=selector)
                pods = self.api.sanitize_for_serialization(listing.items)
                live = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}
                for a in list(self.kubelet.allocations):  # pods deleted while we were away
                    if f"{a.namespace}/{a.pod}" not in live:
                        self.release(a.namespace, a.pod)
                for key in self.dra.pods_with_claims() if self.dra is not None else []:
                    if key not in live:
                        self.release(*key.split("/", 1))
                for p in pods:
                    self.on_pod("ADDED", p)
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listing.metadata.resource_version if listing.metadata else None,
                    timeout_seconds=60,
                ):
                    if self._stop.is_set():
                        w.stop()
                        break
                    self.on_pod(ev["type"], self.api.sanitize_for_serialization(ev["object"]))
            except Exception as exc:  # noqa: BLE001 (relist on any watch failure, as the kubelet does)
                if not self._stop.is_set():
                    log.warning("pod watch failed, relisting: %s", exc)
                    time.sleep(1)

    def _run_timers(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            due: list[tuple[Running, bool]] = []
            with self._lock:
                for key, run in list(self._running.items()):
                    if run.deadline_at is not None and run.deadline_at <= now and run.deadline_at < run.finish_at:
                        due.append((self._running.pop(key), True))
                    elif run.finish_at <= now:
                        due.append((self._running.pop(key), False))
                nxt = min(
                    (min(r.finish_at, r.deadline_at or r.finish_at) for r in self._running.values()), default=now + 1
                )
            for run, deadline in due:
                try:
                    self.finish(run, deadline)
                except Exception as exc:  # noqa: BLE001
                    log.warning("finishing %s/%s failed, retrying: %s", run.namespace, run.name, exc)
                    with self._lock:
                        self._running[f"{run.namespace}/{run.name}"] = run
            self._wake.wait(max(0.05, min(1.0, nxt - time.monotonic())))
            self._wake.clear()

    def _status_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.update_node_status()
            except Exception as exc:  # noqa: BLE001
                log.warning("node status update failed: %s", exc)
            self._stop.wait(self.status_interval)

    def run(self) -> None:
        self._ready_since = now_iso()
        (self.dir / "pod-resources").mkdir(parents=True, exist_ok=True)
        (self.dir / "registered").unlink(missing_ok=True)
        (self.dir / "dra-registered").unlink(missing_ok=True)
        self._restore_checkpoint()
        self.kubelet.start()
        if self._client_ca is not None:
            self.log_server = ContainerLogServer(self.dir / "pki", self._client_ca, book=self.logs).start()
            log.info("serving container logs on https://127.0.0.1:%d", self.log_server.port)
        log.info("node agent for %s: kubelet socket %s", self.node, self.kubelet.socket_path)
        self.ensure_node()
        threads = [
            threading.Thread(target=t, daemon=True, name=t.__name__)
            for t in (self._watch_pods, self._admit_pods, self._run_timers, self._status_loop)
        ]
        if self.dra is not None:
            threads.append(threading.Thread(target=self.dra.run_watcher, daemon=True, name="dra-plugin-watcher"))
        for t in threads:
            t.start()
        self._stop.wait()
        if self.dra is not None:
            self.dra.stop()
        if self.log_server is not None:
            self.log_server.stop()
        self.kubelet.stop()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
