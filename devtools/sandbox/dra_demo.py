"""`gpucaas sandbox --allocation dra --demo`: the scenario of 1-, 2-, 4- and 8-GPU pods through DRA.

The API's pods do not use ResourceClaimTemplates yet in this mode (the tenancy controller
and the API get that in the DRA cluster work), so the demo plays the part they will play:
it creates the ResourceClaimTemplates (``core.dra.claim_template``) in a namespace
and four pods of the documented shape (``spec.resourceClaims`` naming the template, the
container's ``resources.claims``). Then it observes every step from its source of truth:
the claim kube-controller-manager's resourceclaim controller generated, its allocation by
kube-scheduler's DynamicResources plugin, the partition the DRA driver activated for it (binding condition
``gpucaas.dev/partition-active``), the binding, NodePrepareResources' CDI devices (the
kubelet's DRA checkpoint), Running, Succeeded, Unprepare (the partition released), and the claim
deleted with its pod done. It fails if any step is missing or if two pods ever held
overlapping GPUs.
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

from core import dra
from core.fabric_client import FabricClient, FabricError
from devtools.sandbox import kubelet_records
from devtools.sandbox.runner import Sandbox
from services.dra_driver import slices

NAMESPACE = "dra-demo"
SCENARIO_SIZES = (1, 2, 4, 8)
IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8"

STEPS = (
    ("claim_created", "ResourceClaim created from the template"),
    ("allocated", "claim allocated (kube-scheduler's structured allocator)"),
    ("partition_active", "partition active, binding condition True"),
    ("scheduled", "pod bound to the node"),
    ("prepared", "NodePrepareResources: CDI devices, resolved in the node's CDI spec"),
    ("running", "Running"),
    ("succeeded", "Succeeded"),
    ("released", "claim unprepared and deleted, partition released"),
)


def dra_pod(name: str, gpus: int, seconds: float = 4.0) -> dict[str, Any]:
    """A pod of the documented DRA shape asking for ``gpus`` GPUs through the size's template."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "gpucaas-dra-demo"}},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": dra.claim_template_name(gpus)}],
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "command": ["sleep", str(seconds)],
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }


def ensure_namespace(core: Any, custom: Any, namespace: str, sizes: tuple[int, ...] = SCENARIO_SIZES) -> None:
    """The namespace and one ResourceClaimTemplate per size (what the tenancy controller will create)."""
    from kubernetes.client import ApiException

    for create in (
        lambda: core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        *(
            lambda s=s: custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", dra.claim_template(s, namespace)
            )
            for s in sizes
        ),
    ):
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:
                raise


def gpus_of_devices(devices: list[str]) -> set[int]:
    """Physical GPU ids of device names (``gpu-p9`` -> its GPU)."""
    return set(slices.gpus_of_devices(devices))


def cdi_device_nodes(cdi_dir: Path) -> dict[str, list[str]]:
    """CDI id -> container device nodes, from the CDI specs in ``cdi_dir`` (what the runtime resolves)."""
    out: dict[str, list[str]] = {}
    for spec_file in cdi_dir.glob("*.json"):
        spec = json.loads(spec_file.read_text())
        for d in spec.get("devices", []):
            out[f"{spec['kind']}={d['name']}"] = [n["path"] for n in d.get("containerEdits", {}).get("deviceNodes", [])]
    return out


@dataclass
class Tracked:
    name: str
    gpus: int
    seen: dict[str, str] = field(default_factory=dict)
    uid: str = ""
    claim: str | None = None
    claim_uid: str | None = None
    node: str | None = None
    devices: list[str] = field(default_factory=list)
    partition_seen: bool = False
    failed: str | None = None


class DraObserver:
    """Polls the API objects and the fabric services; records each step the first time it is seen."""

    def __init__(self, sandbox: Sandbox, console: Console | None, namespace: str = NAMESPACE) -> None:
        from kubernetes import client

        from core.kube import KubeConnection, new_api_client

        self.api = new_api_client(KubeConnection(kubeconfig=Path(sandbox.kubeconfig)))
        self.core = client.CoreV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)  # answers plain JSON: untyped
        self.console = console
        self.namespace = namespace
        self.sockets = {n.name: n.fabric_socket for n in sandbox.nodes}
        self.cdi_dirs = {n.name: n.cdi_dir for n in sandbox.nodes}
        self.kubelet_dirs = {n.name: n.kubelet.root for n in sandbox.nodes}
        self.tracked: dict[str, Tracked] = {}
        self.overlaps: list[str] = []
        self._stop = threading.Event()

    def record(self, t: Tracked, step: str, detail: str) -> None:
        if step in t.seen:
            return
        t.seen[step] = detail
        if self.console is not None:
            self.console.print(f"  [cyan]{t.name:<10}[/] [green]✓[/] {dict(STEPS)[step]}: {escape(detail)}")

    def observe(self) -> None:
        ns = self.namespace
        pods = {
            p["metadata"]["name"]: p
            for p in self.api.sanitize_for_serialization(self.core.list_namespaced_pod(ns).items)
        }
        claims = {
            c["metadata"]["name"]: c
            for c in self.custom.list_namespaced_custom_object("resource.k8s.io", "v1", ns, "resourceclaims")["items"]
        }
        events = self.api.sanitize_for_serialization(self.core.list_namespaced_event(ns).items)
        holders: dict[str, dict[str, Any]] = {}
        for node, sock in self.sockets.items():
            try:
                with FabricClient(sock, timeout=5) as fc:
                    holders.update({a["holder"]: {**a, "node": node} for a in fc.activations()})
            except FabricError:
                pass
        for t in self.tracked.values():
            self._observe(t, pods.get(t.name), claims, events, holders)
        self._check_overlap(claims)

    def _observe(
        self,
        t: Tracked,
        pod: dict[str, Any] | None,
        claims: dict[str, Any],
        events: list[dict[str, Any]],
        holders: dict[str, Any],
    ) -> None:
        if pod is not None:
            t.uid = pod["metadata"]["uid"]
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
                t.claim = s.get("resourceClaimName")
                self.record(t, "claim_created", f"{t.claim} (template {dra.claim_template_name(t.gpus)})")
        claim = claims.get(t.claim or "")
        if claim is not None:
            t.claim_uid = claim["metadata"]["uid"]
            alloc = (claim.get("status") or {}).get("allocation") or {}
            results = (alloc.get("devices") or {}).get("results") or []
            if results:
                t.devices = [r["device"] for r in results]
                t.node = results[0]["pool"]
                gpus = sorted(gpus_of_devices(t.devices))
                self.record(t, "allocated", f"{', '.join(t.devices)} on {t.node} (physical GPUs {gpus})")
            for d in (claim.get("status") or {}).get("devices") or []:
                for c in d.get("conditions") or []:
                    if c.get("type") == dra.BINDING_CONDITION and c.get("status") == "True":
                        self.record(t, "partition_active", f"{d['device']}: {c.get('message', '')}")
        act = holders.get(f"claim:{t.claim_uid}") if t.claim_uid else None
        if act is not None:
            t.partition_seen = True
        if pod is None:
            return
        phase = (pod.get("status") or {}).get("phase")
        if pod["spec"].get("nodeName"):
            self.record(t, "scheduled", pod["spec"]["nodeName"])
        if "prepared" not in t.seen and t.uid:
            got = kubelet_records.handed_over(self.kubelet_dirs, t.uid, dra=True)
            nodes = cdi_device_nodes(self.cdi_dirs[got.node]) if got is not None else {}
            if got is not None and all(i in nodes for i in got.cdi):
                self.record(t, "prepared", "; ".join(f"{i} -> {', '.join(nodes[i])}" for i in got.cdi))
        for e in events:
            if e["involvedObject"].get("name") != t.name or e["involvedObject"].get("uid") != t.uid:
                continue
            if e.get("reason") == "FailedPrepareDynamicResources":
                t.failed = e.get("message", "")
        if phase == "Running":
            self.record(t, "running", f"on {pod['spec'].get('nodeName')}")
        elif phase == "Succeeded":
            self.record(t, "succeeded", "exit 0")
            if claim is None and act is None and t.partition_seen:
                self.record(t, "released", f"no claim {t.claim}, no fabric holder claim:{t.claim_uid}")
        elif phase == "Failed":
            t.failed = (pod.get("status") or {}).get("message") or "Failed"

    def _check_overlap(self, claims: dict[str, Any]) -> None:
        by_node: dict[str, list[tuple[str, set[int]]]] = {}
        for c in claims.values():
            results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            if results:
                by_node.setdefault(results[0]["pool"], []).append(
                    (c["metadata"]["name"], gpus_of_devices([r["device"] for r in results]))
                )
        for node, held in by_node.items():
            for i, (a, ga) in enumerate(held):
                for b, gb in held[i + 1 :]:
                    if ga & gb:
                        self.overlaps.append(f"{a} and {b} share GPUs {sorted(ga & gb)} on {node}")

    def done(self) -> bool:
        return all(len(t.seen) == len(STEPS) or t.failed for t in self.tracked.values())

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.observe()
            except Exception:  # noqa: BLE001 (an observation retries next round)
                pass
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()


def run_dra_demo(sandbox: Sandbox, console: Console, timeout: float = 240.0) -> bool:
    obs = DraObserver(sandbox, console)
    console.print(
        f"\n[bold]The scenario through DRA[/]: pods asking for {', '.join(map(str, SCENARIO_SIZES))} GPUs "
        f"in namespace {NAMESPACE!r} "
        f"(ResourceClaimTemplates {', '.join(dra.claim_template_name(s) for s in SCENARIO_SIZES)})"
    )
    ensure_namespace(obs.core, obs.custom, NAMESPACE)
    for size in SCENARIO_SIZES:
        t = Tracked(f"gpus-{size}", size)
        obs.tracked[t.name] = t
        obs.core.create_namespaced_pod(NAMESPACE, dra_pod(t.name, size))  # type: ignore[arg-type]  # a plain dict body
    thread = threading.Thread(target=obs.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not obs.done() and time.monotonic() < deadline:
        time.sleep(0.2)
    obs.stop()
    thread.join(timeout=5)
    table = Table(title="DRA scenario")
    table.add_column("pod")
    table.add_column("GPUs")
    table.add_column("node")
    table.add_column("devices")
    table.add_column("steps seen")
    ok = not obs.overlaps
    for t in obs.tracked.values():
        missing = [title for step, title in STEPS if step not in t.seen]
        ok = ok and not missing and not t.failed
        table.add_row(
            t.name,
            str(t.gpus),
            t.node or "-",
            ", ".join(t.devices) or "-",
            "all" if not missing else f"missing: {', '.join(missing)}" + (f" ({t.failed})" if t.failed else ""),
        )
    console.print(table)
    for o in obs.overlaps:
        console.print(f"[red]overlap: {o}[/]")
    console.print("[green]every step observed, no overlap[/]" if ok else "[red]the DRA demo failed[/]")
    return ok
