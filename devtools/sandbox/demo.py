"""`gpucaas sandbox --demo`: the design's scenario (docs/design.md), step by step, against the running sandbox.

It submits the design's exact payload for the never-before-seen tenancy "landon",
follows it to the end, then submits a 2-, a 4- and an 8-GPU container for three
other tenancies at once. An observer polls every source of truth — the API, the
Kubernetes objects, the nodes' CDI specs and fabric services, the GPU leases — and
prints each step the first time it is seen, since some steps (an active NVLink
partition) last only as long as the container runs. The demo succeeds only if
every step was observed for every container.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from core.crds import (
    GPULEASE_PLURAL,
    GROUP,
    LABEL_CONTAINER,
    TENANCY_PLURAL,
    VERSION,
    tenant_namespace,
)
from core.fabric_client import FabricClient, FabricError
from devtools.sandbox import kubelet_records
from devtools.sandbox.runner import Sandbox
from devtools.waiting import wait_for

DESIGN_PAYLOAD = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"}
IMAGE = DESIGN_PAYLOAD["container-url"]

STEPS = (
    ("accepted", "request accepted (202)"),
    ("tenancy_ready", "Tenancy Ready"),
    ("isolation", "namespace and network policies made"),
    ("pod_created", "pod created with the Kata runtime class"),
    ("scheduled", "pod bound to a node"),
    ("gpus_chosen", "GPUs chosen"),
    ("cdi", "CDI devices and /dev/vfio nodes"),
    ("partition_active", "NVLink partition activated"),
    ("running", "Running"),
    ("succeeded", "Succeeded"),
    ("partition_released", "partition released"),
    ("lease_free", "GPU leases checked and Free"),
)


@dataclass
class Tracked:
    label: str
    tenancy: str
    gpus: int
    id: str = ""
    seen: dict[str, str] = field(default_factory=dict)
    node: str | None = None
    pod: str | None = None
    devices: list[str] = field(default_factory=list)
    holder: str | None = None
    partition_seen: bool = False
    succeeded_at: float | None = None


class Observer:
    def __init__(self, sandbox: Sandbox, console: Console) -> None:
        from kubernetes import client

        from core.kube import KubeConnection, new_api_client

        self.sandbox = sandbox
        self.console = console
        api = new_api_client(KubeConnection(kubeconfig=Path(sandbox.kubeconfig)))
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)  # answers plain JSON: untyped
        self.tracked: list[Tracked] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets = {n.name: n for n in sandbox.nodes}
        self._kubelet_dirs = {n.name: n.kubelet.root for n in sandbox.nodes}

    def record(self, t: Tracked, step: str, detail: str) -> None:
        if step in t.seen:
            return
        t.seen[step] = detail
        title = dict(STEPS)[step]
        self.console.print(f"  [cyan]{t.label:<22}[/] [green]✓[/] {title}: {escape(detail)}")

    # --- sources --------------------------------------------------------------------
    def _container(self, t: Tracked) -> dict[str, Any]:
        return self.sandbox.api("GET", f"/v1/containers/{t.id}")

    def _observe(self, t: Tracked) -> None:
        c = self._container(t)
        ns = tenant_namespace(t.tenancy)
        tn = self._get_custom(TENANCY_PLURAL, t.tenancy)
        if tn and (tn.get("status") or {}).get("phase") == "Ready":
            self.record(t, "tenancy_ready", f"tenancy {t.tenancy!r}, namespace {tn['status'].get('namespace')}")
        if "tenancy_ready" in t.seen and "isolation" not in t.seen:
            self._observe_isolation(t, ns)
        pods = (
            self.core.list_namespaced_pod(ns, label_selector=f"{LABEL_CONTAINER}={t.id}").items
            if "tenancy_ready" in t.seen
            else []
        )
        if pods:
            pod = self.api.sanitize_for_serialization(pods[0])
            t.pod = pod["metadata"]["name"]
            spec = pod["spec"]
            limits = spec["containers"][0].get("resources", {}).get("limits", {})
            self.record(
                t,
                "pod_created",
                f"{ns}/{t.pod} runtimeClassName={spec.get('runtimeClassName')} "
                f"limits nvidia.com/gpu={limits.get('nvidia.com/gpu')}",
            )
            if spec.get("nodeName"):
                t.node = spec["nodeName"]
                self.record(t, "scheduled", f"node {t.node} (chosen by the scheduler extender)")
            self._observe_handover(t, ns, pod["metadata"]["uid"])
        if t.holder and t.node:
            self._observe_fabric(t)
        status = c.get("status")
        if status == "Running":
            self.record(t, "running", f"on {c.get('node_name') or t.node}")
        elif status == "Succeeded" and c.get("started_at"):
            # a short run can end between two looks: the kubelet's own start time says it ran
            self.record(t, "running", f"on {c.get('node_name') or t.node}, started {c['started_at']}")
        if status == "Succeeded":
            self.record(t, "succeeded", "the container exited 0")
            t.succeeded_at = t.succeeded_at or time.monotonic()
        if status in ("Failed", "Cancelled"):
            t.seen.setdefault("failed", f"{status}: {c.get('message')}")
        if "succeeded" in t.seen and t.devices:
            self._observe_leases(t)

    def _get_custom(self, plural: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client import ApiException

        try:
            return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _observe_isolation(self, t: Tracked, ns: str) -> None:
        from kubernetes.client import ApiException, NetworkingV1Api

        try:
            self.core.read_namespace(ns)
            cnps = self.custom.list_namespaced_custom_object("cilium.io", "v2", ns, "ciliumnetworkpolicies")["items"]
            nps = NetworkingV1Api(self.api).list_namespaced_network_policy(ns).items
            quotas = self.core.list_namespaced_resource_quota(ns).items
        except ApiException:
            return
        if cnps and nps:
            hard = quotas[0].spec.hard if quotas and quotas[0].spec else {}
            self.record(
                t,
                "isolation",
                f"namespace {ns}; CiliumNetworkPolicy {', '.join(p['metadata']['name'] for p in cnps)}; "
                f"NetworkPolicy {', '.join(str(p.metadata.name if p.metadata else '') for p in nps)}; "
                f"quota {', '.join(f'{k}={v}' for k, v in sorted((hard or {}).items()))}",
            )

    def _observe_handover(self, t: Tracked, ns: str, uid: str) -> None:
        """The GPUs and CDI devices the node's kubelet handed the container (its device manager's
        checkpoint of the device plugin's Allocate answer), or the kubelet's refusal."""
        if "gpus_chosen" in t.seen:
            return
        got = kubelet_records.handed_over(self._kubelet_dirs, uid, dra=False)
        if got is not None:
            t.devices = got.devices
            t.holder = got.holder
            self.record(t, "gpus_chosen", f"{', '.join(t.devices)} on {got.node} — {self._why(t)}")
            self.record(t, "cdi", self._cdi_detail(t, got.cdi))
            return
        events = self.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={t.pod}").items
        for ev in events:
            if ev.reason == "UnexpectedAdmissionError":
                t.seen.setdefault("failed", ev.message or "")

    def _why(self, t: Tracked) -> str:
        from core import topology

        node = self._sockets.get(t.node or "")
        if node is None:
            return "chosen by the device plugin"
        with FabricClient(node.fabric_socket, timeout=5) as fc:
            topo = {g["pci_bus_id"]: g["physical_id"] for g in fc.topology()["gpus"]}
        ids = sorted(topo[d] for d in t.devices if d in topo)
        part = topology.partition_for(ids)
        if part is not None:
            return f"physical ids {ids} = Fabric Manager partition {part.id} ({part.nvlinks} NVLinks)"
        return f"physical ids {ids}: no NVLink partition of that shape (NVLink-less)"

    def _cdi_detail(self, t: Tracked, names: list[str]) -> str:
        node = self._sockets.get(t.node or "")
        paths: dict[str, list[str]] = {}
        if node is not None:
            for spec_file in node.cdi_dir.glob("*.json"):
                spec = json.loads(spec_file.read_text())
                for d in spec.get("devices", []):
                    fq = f"{spec['kind']}={d['name']}"
                    paths[fq] = [n["path"] for n in d.get("containerEdits", {}).get("deviceNodes", [])]
        shown = [f"{n} -> {', '.join(paths.get(n, ['?']))}" for n in names]
        return "; ".join(shown)

    def _observe_fabric(self, t: Tracked) -> None:
        node = self._sockets.get(t.node or "")
        if node is None:
            return
        try:
            with FabricClient(node.fabric_socket, timeout=5) as fc:
                acts = {a["holder"]: a for a in fc.activations()}
        except FabricError:
            return
        act = acts.get(t.holder or "")
        if act is not None:
            t.partition_seen = True
            kind = "NVLink" if len(act["partition_ids"]) == 1 and len(t.devices) > 1 else "isolated"
            self.record(t, "partition_active", f"partition(s) {act['partition_ids']} ({kind}) on {t.node}")
        elif t.partition_seen and "succeeded" in t.seen:
            self.record(t, "partition_released", f"holder {t.holder} has no active partition on {t.node}")

    def _observe_leases(self, t: Tracked) -> None:
        leases = self.custom.list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]
        mine = [lz for lz in leases if lz["spec"]["node"] == t.node and lz["spec"]["pciAddress"] in t.devices]
        if len(mine) != len(t.devices):
            return
        if all((lz.get("status") or {}).get("state") == "Free" for lz in mine):
            served = all(
                any(h.get("tenancy") == t.tenancy for h in (lz.get("status") or {}).get("history", [])) for lz in mine
            )
            checks = {(lz.get("status") or {}).get("lastCheck", {}).get("result") for lz in mine}
            if served and checks == {"Passed"}:
                self.record(t, "lease_free", f"{len(mine)} lease(s): firmware check Passed, state Free")

    # --- loop -----------------------------------------------------------------------
    def run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                tracked = list(self.tracked)
            for t in tracked:
                try:
                    self._observe(t)
                except Exception as exc:  # noqa: BLE001 (an observation retries next round)
                    t.seen.setdefault("_errors", "")
                    t.seen["_errors"] = str(exc)
            self._stop.wait(0.2)

    def add(self, t: Tracked) -> None:
        with self._lock:
            self.tracked.append(t)

    def stop(self) -> None:
        self._stop.set()


def _submit(sandbox: Sandbox, console: Console, obs: Observer, t: Tracked, body: dict[str, Any]) -> None:
    resp = sandbox.api("POST", "/v1/containers", body)
    t.id = resp["id"]
    obs.add(t)
    obs.record(t, "accepted", f"id {t.id}, status {resp['status']}, payload {json.dumps(body)}")


def _done(t: Tracked) -> bool:
    return all(s in t.seen for s, _ in STEPS) or "failed" in t.seen


def run_demo(sandbox: Sandbox, console: Console, timeout: float = 240.0) -> bool:
    console.rule("[bold]gpucaas demo: the design's scenario")
    obs = Observer(sandbox, console)
    thread = threading.Thread(target=obs.run, daemon=True)
    thread.start()
    all_tracked: list[Tracked] = []
    try:
        console.print("[bold]1.[/] the design's payload, for the never-before-seen tenancy 'landon'")
        first = Tracked("landon (1 GPU)", "landon", 1)
        _submit(sandbox, console, obs, first, dict(DESIGN_PAYLOAD))
        all_tracked.append(first)
        wait_for(lambda: _done(first), timeout, what="the design's container's steps")
        console.print("[bold]2.[/] a 2-, a 4- and an 8-GPU container for three other tenancies, at once")
        for tenancy, gpus in (("acme", 2), ("globex", 4), ("initech", 8)):
            t = Tracked(f"{tenancy} ({gpus} GPUs)", tenancy, gpus)
            _submit(sandbox, console, obs, t, {"image": IMAGE, "tenancy": tenancy, "gpus": gpus})
            all_tracked.append(t)
        wait_for(lambda: all(_done(t) for t in all_tracked), timeout, what="every container's steps")
    except TimeoutError:
        console.print("[red]timed out waiting for the remaining steps[/]")
    finally:
        obs.stop()
        thread.join(timeout=5)
    return _summary(console, all_tracked)


def _summary(console: Console, tracked: list[Tracked]) -> bool:
    table = Table(title="steps observed")
    table.add_column("step")
    for t in tracked:
        table.add_column(t.label)
    ok = True
    for step, title in STEPS:
        row = []
        for t in tracked:
            seen = step in t.seen
            ok &= seen
            row.append("[green]✓[/]" if seen else "[red]✗[/]")
        table.add_row(title, *row)
    console.print(table)
    for t in tracked:
        if "failed" in t.seen:
            console.print(f"[red]{t.label}: {t.seen['failed']}[/]")
        if "_errors" in t.seen and not ok:
            console.print(f"[yellow]{t.label}: last observation error: {t.seen['_errors']}[/]")
    console.print("[bold green]every step happened[/]" if ok else "[bold red]some steps did not happen[/]")
    return ok
