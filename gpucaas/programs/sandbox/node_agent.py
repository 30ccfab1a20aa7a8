"""The sandbox node agent: plays a GPU node's kubelet, the way kwok does, but with real devices.

What a kubelet does for a gpucaas pod, it does over the same protocols:
* keeps the Node object (labels, Ready condition, ``nvidia.com/gpu`` capacity and
  allocatable from the device plugin's ListAndWatch stream);
* is the device plugins' kubelet: a real v1beta1 Registration server on
  ``<kubelet-dir>/device-plugins/kubelet.sock`` and a PodResources server
  (``gpucaas.devtools.fake_kubelet``);
* admits each pod bound to the node: GetPreferredAllocation, Allocate (the device
  plugin activates the NVLink partition through the fabric service), records the
  allocation in a checkpoint file (as the kubelet's ``kubelet_internal_checkpoint``),
  and reports the CDI devices in an Event;
* "runs" the container: marks it Running, writes a log that says plainly that nothing
  ran and what the control plane handed over (GPUs, CDI devices, NVLink), and after the run time (``sleep N`` in the
  command, else a default) marks it Succeeded — or Failed on ``activeDeadlineSeconds``;
* frees the devices when the pod terminates or is deleted, and completes deletion.
No container or VM really runs: that is the simulated part.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from gpucaas.core.kube import Conflict, Kube, KubeError, NotFound
from gpucaas.devtools.kube_emulator.logs_client import write_pod_log
from gpucaas.programs.sandbox.scheduler import GPU_NODE_LABEL
from gpucaas.devtools.fake_kubelet import AdmissionError, Allocation, FakeKubelet
from services.device_plugin.api import dp_pb2
from services.placement.extender import pod_gpu_count

log = logging.getLogger(__name__)

CHECKPOINT = "node_agent_checkpoint.json"


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


def simulated_log(pod: dict[str, Any], alloc: Allocation | None, node: str) -> str:
    """What the sandbox writes as the container's log: no image runs here, so it prints no
    program output, only what the control plane really did for the pod."""
    image = pod["spec"]["containers"][0].get("image", "")
    devices = list(alloc.device_ids) if alloc else []
    cdi = [d.name for d in alloc.response.cdi_devices] if alloc else []
    nvlink = alloc.response.envs.get("GPUCAAS_NVLINK", "false") if alloc else "false"
    lines = [f"[gpucaas sandbox] SIMULATED: no container runs in the sandbox; {image} was not pulled or started.",
             f"[gpucaas sandbox] node {node}: {len(devices)} GPU(s) allocated by the device plugin, NVLink {nvlink}."]
    lines += [f"[gpucaas sandbox]   GPU {bdf} -> CDI device {cdi[i] if i < len(cdi) else '-'}"
              for i, bdf in enumerate(devices)]
    return "\n".join(lines) + "\n"


@dataclass
class Running:
    namespace: str
    name: str
    uid: str
    finish_at: float
    deadline_at: float | None


class NodeAgent:
    def __init__(self, api: client.ApiClient, node_name: str, kubelet_dir: Path,
                 resource_name: str = "nvidia.com/gpu", default_run_seconds: float = 3.0,
                 status_interval: float = 1.0) -> None:
        self.kube = Kube.of(api)  # the core adapter: its timeouts and one error tree
        self.api = self.kube.api_client
        self.core = self.kube.core
        self.node = node_name
        self.dir = Path(kubelet_dir)
        self.resource = resource_name
        self.default_run_seconds = default_run_seconds
        self.status_interval = status_interval
        self.registration_timeout = 60.0
        self.device_wait_timeout = 15.0
        self.kubelet = FakeKubelet(self.dir / "device-plugins", self.dir / "pod-resources" / "kubelet.sock")
        self._running: dict[str, Running] = {}
        self._handled: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()

    # --- node object -----------------------------------------------------------------
    def _live_plugin(self):  # noqa: ANN202
        """The registered plugin, unless its ListAndWatch stream ended (it went away)."""
        conn = self.kubelet.plugins.get(self.resource)
        return conn if conn is not None and not conn.stream_ended else None

    def _healthy_devices(self) -> list[str]:
        conn = self._live_plugin()
        return conn.healthy() if conn else []

    def _wait_for_live_plugin(self) -> None:
        """After a restart of the plugin or of this agent, wait for the plugin to register again."""
        conn = self.kubelet.plugins.get(self.resource)
        if conn is not None and not conn.stream_ended:
            return
        seen = sum(r.resource_name == self.resource for r in self.kubelet.registrations)
        want = seen + 1 if conn is not None else max(1, seen)
        try:
            self.kubelet.wait_for_plugin(self.resource, registrations=want, timeout=self.registration_timeout)
        except TimeoutError:
            log.warning("no live %s device plugin after %.0fs", self.resource, self.registration_timeout)

    def _wait_for_devices(self, count: int) -> None:
        """The sandbox scheduler places by partitions and leases, not by the kubelet's device health,
        so a pod can be bound a moment before its GPUs are reported Healthy again (a lease checked
        and Free, the next ListAndWatch update not yet sent): give them that moment."""
        conn = self._live_plugin()
        if conn is None:
            return
        conn.wait_for(lambda c: len(set(c.healthy()) - self.kubelet.allocated_ids(self.resource)) >= count,
                      timeout=self.device_wait_timeout)

    def _admit_devices(self, pod: dict[str, Any], count: int) -> Allocation:
        md = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        self._wait_for_live_plugin()
        self._wait_for_devices(count)
        try:
            return self.kubelet.admit(md["namespace"], md["name"], self.resource, count, container=container)
        except AdmissionError as exc:
            if "UNAVAILABLE" not in str(exc):
                raise
            # The plugin died under us: wait until the kubelet side notices, then for its return.
            conn = self.kubelet.plugins.get(self.resource)
            if conn is not None:
                conn.wait_for(lambda c: c.stream_ended, timeout=10)
            self._wait_for_live_plugin()
            return self.kubelet.admit(md["namespace"], md["name"], self.resource, count, container=container)

    def _all_devices(self) -> list[str]:
        conn = self.kubelet.plugins.get(self.resource)
        return sorted(conn.health()) if conn else []

    def ensure_node(self) -> None:
        body = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node, "labels": {
                "kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", GPU_NODE_LABEL: "true",
                "node.kubernetes.io/instance-type": "hgx-h100-8",
            }},
            "spec": {},
        }
        try:
            self.kube.call(self.core.create_node, body, what=f"register node {self.node}")
        except Conflict:
            pass
        self.update_node_status()

    def update_node_status(self) -> None:
        devices = self._all_devices()
        healthy = self._healthy_devices()
        registered = self.resource in self.kubelet.plugins
        status = {
            "capacity": {"cpu": "224", "memory": "2Ti", "pods": "110", self.resource: str(len(devices))},
            "allocatable": {"cpu": "220", "memory": "1900Gi", "pods": "110", self.resource: str(len(healthy))},
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "gpucaas sandbox node agent is posting ready status"
                           + ("" if registered else "; no device plugin registered yet"),
                "lastHeartbeatTime": now_iso(), "lastTransitionTime": self._ready_since,
            }],
            "addresses": [{"type": "Hostname", "address": self.node}],
            "nodeInfo": {
                "kubeletVersion": "v1.31.0-gpucaas-sandbox", "containerRuntimeVersion": "containerd://1.7 (kata, simulated)",
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "gpucaas sandbox",
                "kernelVersion": os.uname().release, "kubeProxyVersion": "", "machineID": self.node,
                "systemUUID": self.node, "bootID": self.node,
            },
        }
        self.core.patch_node_status(self.node, {"status": status})
        marker = self.dir / "registered"
        if registered and devices:
            marker.write_text(json.dumps({"resource": self.resource, "devices": devices}))

    # --- checkpoint (restart safety) ---------------------------------------------------
    def _save_checkpoint(self) -> None:
        data = [
            {"namespace": a.namespace, "pod": a.pod, "container": a.container, "resource": a.resource_name,
             "devices": list(a.device_ids), "cdi": [d.name for d in a.response.cdi_devices]}
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
            self.kubelet.allocations.append(Allocation(
                a["namespace"], a["pod"], a["container"], a["resource"], tuple(a["devices"]), resp, None))
        log.info("restored %d allocation(s) from the checkpoint", len(self.kubelet.allocations))

    # --- pods --------------------------------------------------------------------------
    def _event(self, pod: dict[str, Any], reason: str, message: str, etype: str = "Normal") -> None:
        md = pod["metadata"]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": md["name"],
                               "namespace": md["namespace"], "uid": md.get("uid")},
            "reason": reason, "message": message, "type": etype,
            "source": {"component": "kubelet", "host": self.node},
            "firstTimestamp": now_iso(), "lastTimestamp": now_iso(), "count": 1,
        }
        try:
            self.kube.call(self.core.create_namespaced_event, md["namespace"], body, what="create event")
        except KubeError as exc:
            log.debug("event for %s/%s not recorded: %s", md["namespace"], md["name"], exc.summary())

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        md = pod["metadata"]
        try:
            self.kube.call(self.core.patch_namespaced_pod_status, md["name"], md["namespace"], {"status": status},
                           what=f"patch pod {md['namespace']}/{md['name']} status", idempotent=True)
        except NotFound:
            pass

    def _append_log(self, pod: dict[str, Any], text: str) -> None:
        """Store the simulated output through the emulator's log endpoint (emulator-only)."""
        md = pod["metadata"]
        try:
            write_pod_log(self.api, md["namespace"], md["name"], text,
                          container=pod["spec"]["containers"][0]["name"])
        except (client.ApiException, OSError) as exc:
            log.warning("cannot store the log of %s/%s: %s", md["namespace"], md["name"], exc)

    def _container_status(self, pod: dict[str, Any], state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
        c = pod["spec"]["containers"][0]
        return [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": ready,
                 "restartCount": 0, "started": ready, "state": state,
                 "containerID": f"kata://{pod['metadata'].get('uid', '')[:12]}"}]

    def admit(self, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        key = f"{md['namespace']}/{md['name']}"
        count = pod_gpu_count(pod, self.resource)
        alloc: Allocation | None = next(
            (a for a in self.kubelet.allocations if (a.namespace, a.pod) == (md["namespace"], md["name"])), None)
        if count and alloc is None:
            try:
                alloc = self._admit_devices(pod, count)
            except AdmissionError as exc:
                log.warning("admission of %s failed: %s", key, exc)
                self._event(pod, "UnexpectedAdmissionError", str(exc), "Warning")
                self._patch_status(pod, {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                                         "message": f"Pod was rejected: {exc}"})
                return
            self._save_checkpoint()
            cdi = ", ".join(d.name for d in alloc.response.cdi_devices)
            why = f" (preferred: {', '.join(alloc.preferred)})" if alloc.preferred else ""
            self._event(pod, "DevicesAllocated",
                        f"{self.resource}: {', '.join(alloc.device_ids)}{why}; CDI devices: {cdi}")
        started = now_iso()
        self._event(pod, "Started", "Started container in a Kata micro-VM (simulated)")
        self._patch_status(pod, {
            "phase": "Running", "hostIP": "192.0.2.10", "podIP": "10.244.0.10", "startTime": started,
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": started}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": self._container_status(pod, {"running": {"startedAt": started}}, True),
        })
        deadline = pod["spec"].get("activeDeadlineSeconds")
        now = time.monotonic()
        with self._lock:
            self._running[key] = Running(md["namespace"], md["name"], md.get("uid", ""),
                                         now + run_seconds_of(pod, self.default_run_seconds),
                                         now + float(deadline) if deadline else None)
        self._wake.set()
        self._append_log(pod, simulated_log(pod, alloc, self.node))

    def release(self, namespace: str, name: str) -> None:
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
            term = {"terminated": {"exitCode": 137, "reason": "DeadlineExceeded", "startedAt": started, "finishedAt": finished}}
            status = {"phase": "Failed", "reason": "DeadlineExceeded",
                      "message": "Pod was active on the node longer than the specified deadline"}
        else:
            term = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": finished}}
            status = {"phase": "Succeeded"}
        status["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished}]
        status["containerStatuses"] = self._container_status(pod, term, False)
        self._patch_status(pod, status)
        self.release(run.namespace, run.name)

    def on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        key = f"{md['namespace']}/{md['name']}"
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if event_type == "DELETED":
            with self._lock:
                self._running.pop(key, None)
                self._handled.discard(key)
            self.release(md["namespace"], md["name"])
            return
        if md.get("deletionTimestamp"):
            with self._lock:
                self._running.pop(key, None)
            self.release(md["namespace"], md["name"])
            if not md.get("finalizers"):
                try:  # the containers are stopped: complete the graceful deletion, as the kubelet does
                    self.kube.call(self.core.delete_namespaced_pod, md["name"], md["namespace"],
                                   grace_period_seconds=0, idempotent=True)
                except NotFound:
                    pass
            return
        if phase in ("Succeeded", "Failed"):
            with self._lock:
                self._running.pop(key, None)
            self.release(md["namespace"], md["name"])
            return
        with self._lock:
            if key in self._handled:
                return
            self._handled.add(key)
        if phase == "Pending":
            self.admit(pod)
        elif phase == "Running":  # after a restart: keep running from where it was
            alloc_known = any((a.namespace, a.pod) == (md["namespace"], md["name"]) for a in self.kubelet.allocations)
            log.info("resuming %s (devices %s)", key, "restored" if alloc_known else "none")
            started = (pod.get("status") or {}).get("startTime")
            elapsed = 0.0
            if started:
                elapsed = (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()
            now = time.monotonic()
            deadline = pod["spec"].get("activeDeadlineSeconds")
            with self._lock:
                self._running[key] = Running(md["namespace"], md["name"], md.get("uid", ""),
                                             now + max(0.0, run_seconds_of(pod, self.default_run_seconds) - elapsed),
                                             now + max(0.0, float(deadline) - elapsed) if deadline else None)
            self._wake.set()

    # --- loops ------------------------------------------------------------------------
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
                for p in pods:
                    self.on_pod("ADDED", p)
                w = watch.Watch()
                for ev in w.stream(self.core.list_pod_for_all_namespaces, field_selector=selector,
                                   resource_version=listing.metadata.resource_version, timeout_seconds=60):
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
                nxt = min((min(r.finish_at, r.deadline_at or r.finish_at) for r in self._running.values()), default=now + 1)
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
        self._restore_checkpoint()
        self.kubelet.start()
        log.info("node agent for %s: kubelet socket %s", self.node, self.kubelet.socket_path)
        self.ensure_node()
        threads = [threading.Thread(target=t, daemon=True, name=t.__name__)
                   for t in (self._watch_pods, self._run_timers, self._status_loop)]
        for t in threads:
            t.start()
        self._stop.wait()
        self.kubelet.stop()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
