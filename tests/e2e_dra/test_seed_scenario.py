"""The seed scenario in the DRA mode: pods asking for 1, 2, 4 and 8 GPUs, end to end.

Each pod's claim is generated from its template, allocated on a node's published
partitions, its partition activated before binding, prepared by the DRA driver through
the node agent's kubelet side (CDI ids of exactly the partition's GPUs, resolvable in the
node's CDI spec), then unprepared and deleted when the pod is done, with the partition
released. Twice the capacity of the two nodes is asked for, so pods wait for each other;
two claims on one node never hold a GPU in common at any moment observed.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from kubernetes import client

from core import dra
from core.crds import GPULEASE_PLURAL, GROUP, VERSION
from core.topology import partition_by_id
from devtools.waiting import wait_for
from gpucaas.sandbox import runner
from gpucaas.sandbox.dra_demo import cdi_device_nodes, dra_pod, ensure_namespace, gpus_of_devices
from services.dra_driver.slices import partition_of_device
from tests.e2e.conftest import activations
from tests.e2e_dra.conftest import pci_of

NS = "e2e-dra-seed"
SIZES = (1, 2, 4, 8, 8, 4, 2, 1, 2, 1)  # 33 GPUs for 16


def _claims(custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
    return custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaims")["items"]


def _overlaps(claims: list[dict[str, Any]]) -> list[str]:
    held: dict[str, list[tuple[str, set[int]]]] = {}
    bad = []
    for c in claims:
        results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for r in results:
            gpus = gpus_of_devices([r["device"]])
            for other, og in held.get(r["pool"], []):
                if gpus & og:
                    bad.append(f"{c['metadata']['name']} and {other} share {sorted(gpus & og)} on {r['pool']}")
            held.setdefault(r["pool"], []).append((c["metadata"]["name"], gpus))
    return bad


def test_pods_of_every_size_run_on_whole_partitions_without_overlap(
    dra_sandbox: runner.Sandbox, k8s: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    ensure_namespace(core, custom, NS, sizes=(1, 2, 4, 8))
    overlaps: list[str] = []
    allocations: dict[str, list[str]] = {}  # claim -> devices, as last seen while allocated
    stop = threading.Event()

    def watch_allocations() -> None:
        while not stop.is_set():
            claims = _claims(custom)
            overlaps.extend(_overlaps(claims))
            for c in claims:
                results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                if results:
                    allocations[c["metadata"]["name"]] = [f"{r['pool']}/{r['device']}" for r in results]
            stop.wait(0.1)

    watcher = threading.Thread(target=watch_allocations, daemon=True)
    watcher.start()
    names = [f"p{i}-gpus-{n}" for i, n in enumerate(SIZES)]
    for name, n in zip(names, SIZES, strict=True):
        core.create_namespaced_pod(NS, dra_pod(name, n, seconds=3))
    try:
        for name in names:
            wait_for(
                lambda name=name: core.read_namespaced_pod(name, NS).status.phase in ("Succeeded", "Failed"),
                timeout=300,
                what=f"pod {name} to finish",
            )
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert not overlaps, overlaps

    events = k8s.sanitize_for_serialization(core.list_namespaced_event(NS).items)
    for name, n in zip(names, SIZES, strict=True):
        pod = k8s.sanitize_for_serialization(core.read_namespaced_pod(name, NS))
        assert pod["status"]["phase"] == "Succeeded", (name, pod["status"])
        node = pod["spec"]["nodeName"]
        (claim_status,) = pod["status"]["resourceClaimStatuses"]
        claim = claim_status["resourceClaimName"]
        assert re.fullmatch(rf"{name}-gpus-[a-z0-9]{{5}}", claim), claim
        devices = allocations[claim]
        assert all(d.startswith(f"{node}/") for d in devices), (node, devices)
        partitions = [partition_by_id(partition_of_device(d.split("/")[1])) for d in devices]
        # a size that is a partition size is one partition of that size
        assert (len(partitions), partitions[0].size) == ((1, n) if n in dra.NVLINK_SIZES else (n, 1)), devices
        # the CDI ids handed over are exactly the partition's GPUs, and the node's CDI spec resolves them
        pci = pci_of(dra_sandbox, node)
        want = sorted(f"nvidia.com/gpu={pci[g]}" for p in partitions for g in p.sorted_gpus())
        (prepared,) = [e for e in events if e["involvedObject"]["name"] == name and e["reason"] == "ResourcesPrepared"]
        got = sorted(re.findall(r"nvidia\.com/gpu=[0-9a-f:.]+", prepared["message"]))
        assert got == want, (name, prepared["message"])
        spec = cdi_device_nodes(next(p.cdi_dir for p in dra_sandbox.nodes if p.name == node))
        assert all(spec.get(i) and all(path.startswith("/dev/vfio/") for path in spec[i]) for i in got), spec
        assert claim in core.read_namespaced_pod_log(name, NS)

    # the claims of finished pods are deleted and no partition stays active for a claim
    wait_for(lambda: not _claims(custom), timeout=60, what="the generated claims to be deleted")
    wait_for(
        lambda: not [a for acts in activations(dra_sandbox).values() for a in acts if a["holder"].startswith("claim:")],
        timeout=60,
        what="every claim's partition released",
    )

    # GPU leases followed the claims: each pod's GPUs were leased to it, and after Unprepare
    # every GPU went through the firmware check back to Free
    def leases_settled() -> list[dict[str, Any]] | None:
        items = custom.list_cluster_custom_object(GROUP, VERSION, GPULEASE_PLURAL)["items"]
        ok = len(items) == 16 and all((lz.get("status") or {}).get("state") == "Free" for lz in items)
        return items if ok else None

    leases = wait_for(leases_settled, timeout=120, what="every GPU lease Free again")
    held_by = {
        (h.get("namespace"), h.get("pod"), h.get("check"))
        for lz in leases
        for h in (lz.get("status") or {}).get("history") or []
    }
    for name, n in zip(names, SIZES, strict=True):
        entries = [
            lz
            for lz in leases
            for h in (lz.get("status") or {}).get("history") or []
            if (h.get("namespace"), h.get("pod"), h.get("check")) == (NS, name, "Passed")
        ]
        assert len(entries) == n, (name, held_by)
