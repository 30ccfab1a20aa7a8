"""Cold start with a tenant image of a real size: POST /v1/containers -> the container's "ready" line.

Run: ``python -m benchmarks.big_image [--quick] [--runs N] [--mbit M]``.

Set-up:

* the image: :mod:`devtools.real_node.big_image`, 3.6 GB in five layers of incompressible
  content shaped like NVIDIA's PyTorch container, and its eStargz copy (each layer rebuilt by
  the pinned stargz-snapshotter module's converter, the entry point's files first), written
  once into a cache outside the work tree; its entry point reads about 1 MB of its files,
  prints ``ready: ...`` and exits;
* the registry that serves both sits across a link of ``--mbit`` Mbit/s (1,000 by default), a
  network namespace and ``tc`` (:mod:`devtools.real_node.slow_link`), so that a pull costs
  what it costs over a datacenter network; the images are pushed once into its storage;
* ``gpucaas sandbox`` with its two real nodes (containerd + runc + the pinned kubelet, the
  device plugin and fabric service), whose containerd maps the images' registry name to that
  link: ``gpu-node-a`` with containerd's own snapshotter (overlayfs), ``gpu-node-b`` with the
  stargz snapshotter (:mod:`devtools.real_node.lazy_pull`). Each case cordons the other node.

Each run submits one 1-GPU container through the API as a tenant would, and takes the time
from sending the POST to the moment the container printed its ``ready`` line (the timestamp
containerd gave the line in the pod's log, read with ``kubectl logs --timestamps`` once the API
reports the container ended; both clocks are this machine's). The cases, in this order:

* ``full_pull``: ``gpu-node-a`` does not hold the image (each run starts a fresh sandbox: a
  node that ran an image keeps its snapshots while the ended containers are kept): the
  kubelet pulls and containerd unpacks all of it before the process starts;
* ``warm``: ``gpu-node-a`` holds the image (the run after a full pull); the API's
  ``imagePullPolicy: Always`` still asks the registry for the manifest;
* ``lazy``: the eStargz copy on ``gpu-node-b``, which does not hold it: containerd fetches the
  manifest and config, the snapshotter mounts each layer, fetching its table of contents and
  the prioritised files, and the rest of each file as it is read (the remainder in the
  background, after the start);
* ``warm_image``: an admin then makes the image a warm image (``POST /v1/admin/warm-images``,
  what ``caasctl warm-images add`` sends); the controller's DaemonSet has every GPU node pull
  it, and once ``GET /v1/admin/nodes`` shows ``gpu-node-b`` holding it (``warm_image_held_s``
  after the POST), a container of it runs there.

The last line of stdout is one JSON object: ``image_bytes`` (what a full pull transfers: the
compressed layers, config and manifest; ``estargz_image_bytes`` the copy's), ``image_layers``,
``image_files``, ``link_mbit``, ``ready_s_full_pull`` / ``ready_s_warm`` / ``ready_s_lazy`` /
``ready_s_warm_image`` (the median of ``--runs`` runs; each run's figure in ``..._runs``),
``warm_image_held_s``, ``lazy_ratio_vs_full_pull``,
``pull_s_<case>`` (the kubelet's own account of the pull, from its ``Pulled`` event),
``link_floor_s`` (``image_bytes`` at the link's rate: no full pull can be faster),
``read_at_start_bytes`` (what the entry point read), ``runs`` and ``quick``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.kit.gpucaas_api import GpucaasApi
from benchmarks.kit.report import emit, say
from benchmarks.kit.sandbox import sandbox
from benchmarks.kit.tenancies import open_tenancies, wait_ready
from core import crds
from devtools import folders
from devtools.local_cluster import binaries
from devtools.real_node import big_image, images
from devtools.real_node.slow_link import SlowLink

TENANCY = "bigimage"
#: containerd's own snapshotter (overlayfs): full pulls, then warm starts
PLAIN_NODE = "gpu-node-a"
#: the stargz snapshotter (:mod:`devtools.real_node.lazy_pull`): lazy pulls of the eStargz copy
LAZY_NODE = "gpu-node-b"
#: case -> the node it runs on and the image it runs, in the order each run takes them
CASES = {
    "full_pull": (PLAIN_NODE, big_image.REFERENCE),
    "warm": (PLAIN_NODE, big_image.REFERENCE),
    "lazy": (LAZY_NODE, big_image.LAZY_REFERENCE),
    "warm_image": (LAZY_NODE, big_image.REFERENCE),
}
#: the kubelet's Pulled event: "Successfully pulled image "..." in 31.2s (31.2s including waiting)..."
PULLED = re.compile(r"Successfully pulled image .* in ([0-9.]+)(ms|s) ")
FINISHED = ("Succeeded", "Failed", "Cancelled")
#: how long one run may take: a full pull at 100 Mbit/s is about 5 minutes
RUN_DEADLINE_S = 900.0


def run_once(api: GpucaasApi, token: str, kubectl: list[str], reference: str) -> tuple[float, float | None, str]:
    """One container of the image ``reference``: seconds from the POST to its ready line, the
    kubelet's pull time (None when its event says the image was present), and the line."""
    body = {"image": reference, "gpus": 1}
    posted = time.time()
    cid = api.expect("POST", "/v1/containers", token, body, ok=(202,))["id"]
    deadline = time.monotonic() + RUN_DEADLINE_S
    while True:
        row = api.expect("GET", f"/v1/containers/{cid}", token)
        if row["status"] in FINISHED:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"container {cid} still {row['status']} after {RUN_DEADLINE_S:.0f} s")
        time.sleep(0.5)
    if row["status"] != "Succeeded":
        raise RuntimeError(f"container {cid} ended {row['status']}: {row.get('reason')} {row.get('message')}")
    ns = crds.tenant_namespace(TENANCY)
    pod = _pod_of(kubectl, ns, cid)
    ready, line = ready_line(_kubectl(kubectl, "-n", ns, "logs", pod, "--timestamps"))
    return ready - posted, _pull_seconds(kubectl, ns, pod), line


def ready_line(log: str) -> tuple[float, str]:
    """The time (seconds since the epoch) and text of the first ready line of a log read with
    ``--timestamps`` (each line prefixed with containerd's RFC 3339 time, to the nanosecond)."""
    for entry in log.splitlines():
        stamp, _, line = entry.partition(" ")
        if line.startswith(big_image.READY):
            # fromisoformat takes microseconds at most: the nanoseconds' last three digits go
            whole, _, fraction = stamp.rstrip("Z").partition(".")
            return datetime.fromisoformat(f"{whole}.{fraction[:6] or 0}+00:00").timestamp(), line
    raise ValueError(f"no line starting {big_image.READY!r} in the log: {log[-300:]!r}")


def pull_seconds(message: str) -> float | None:
    """The pull's duration in a kubelet ``Pulled`` event (None: the image was already present)."""
    found = PULLED.search(message)
    if found is None:
        return None
    value = float(found.group(1))
    return value / 1000 if found.group(2) == "ms" else value


def _kubectl(kubectl: list[str], *args: str) -> str:
    return subprocess.run([*kubectl, *args], check=True, capture_output=True, text=True).stdout


def _pod_of(kubectl: list[str], ns: str, cid: str) -> str:
    selector = f"{crds.LABEL_CONTAINER}={cid}"
    name = "jsonpath={.items[0].metadata.name}"
    return _kubectl(kubectl, "-n", ns, "get", "pods", "-l", selector, "-o", name).strip()


def _pull_seconds(kubectl: list[str], ns: str, pod: str) -> float | None:
    selector = f"involvedObject.name={pod},reason=Pulled"
    events = json.loads(_kubectl(kubectl, "-n", ns, "get", "events", "--field-selector", selector, "-o", "json"))
    return next((p for e in events["items"] if (p := pull_seconds(e.get("message", ""))) is not None), None)


def make_warm(api: GpucaasApi, admin_token: str, reference: str, node: str) -> float:
    """Make ``reference`` a warm image as an admin does; seconds until ``node`` holds it (the
    kubelet's ``status.images``, as ``GET /v1/admin/nodes`` shows it)."""
    started = time.time()
    api.expect("POST", "/v1/admin/warm-images", admin_token, {"image": reference}, ok=(200, 201))
    deadline = time.monotonic() + RUN_DEADLINE_S
    while True:
        rows = api.expect("GET", "/v1/admin/nodes", admin_token)["data"]
        warm: list[dict[str, Any]] = next((r["warm_images"] for r in rows if r["name"] == node), [])
        if any(w["image"] == reference and w["held"] for w in warm):
            return time.time() - started
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node} does not hold the warm image {reference} after {RUN_DEADLINE_S:.0f} s")
        time.sleep(0.5)


def only(kubectl: list[str], node: str, nodes: list[str]) -> None:
    """New pods go to ``node`` alone: the others cordoned (kube-scheduler's own filter)."""
    for other in nodes:
        _kubectl(kubectl, "uncordon" if other == node else "cordon", other)


def run(runs: int, mbit: int, quick: bool) -> dict[str, Any]:
    say(f"writing the image and its eStargz copy (once; cached in {big_image.cache_dir()})")
    layout = big_image.cached_layout(binaries.bin_dir(build=True))
    link_dir = Path(tempfile.mkdtemp(prefix="gpucaas-big-image-link-", dir="/tmp"))
    link = SlowLink(link_dir, big_image.cache_dir() / "registry", mbit=mbit).start()
    times: dict[str, list[float]] = {case: [] for case in CASES}
    pulls: dict[str, list[float]] = {case: [] for case in CASES}
    held: list[float] = []
    try:
        say(f"the far registry at {link.address}, behind {link.qdisc()}")
        for reference in (big_image.REFERENCE, big_image.LAZY_REFERENCE):
            _, repository, tag = images.split(reference)
            images.push(layout.path, images.Image(repository, tag), link.address)
        registry = images.split(big_image.REFERENCE)[0]
        nodes = [PLAIN_NODE, LAZY_NODE]
        # each run on a fresh sandbox: a node that ran the image keeps its snapshots (the ended
        # containers' root filesystems), and the snapshotter its fetched chunks
        for i in range(runs):
            with sandbox(
                "gpucaas-bigimg-", nodes=tuple(nodes), mirrors={registry: link.address}, lazy_pull_nodes=(LAZY_NODE,)
            ) as sb:
                assert sb.cluster is not None
                api = GpucaasApi.of(sb)
                token = open_tenancies(api, sb.admin_token, [TENANCY], gpu_quota=8, pod_quota=20)[TENANCY]
                wait_ready(sb.kubeconfig, [TENANCY])
                kubectl = [str(sb.cluster.bin_dir / "kubectl"), "--kubeconfig", str(sb.kubeconfig)]
                for case, (node, reference) in CASES.items():
                    only(kubectl, node, nodes)
                    if case == "warm_image":
                        held.append(make_warm(api, sb.admin_token, reference, node))
                        say(f"run {i + 1}: {node} holds the warm image {held[-1]:.2f} s after the admin's POST")
                    seconds, pull, line = run_once(api, token, kubectl, reference)
                    say(f"run {i + 1}, {case} on {node}: ready after {seconds:.2f} s (pull {pull} s): {line}")
                    times[case].append(seconds)
                    if pull is not None:
                        pulls[case].append(pull)
    finally:
        link.stop()
        folders.remove(link_dir)
    read_at_start = int(line.split("read ", 1)[1].split(" ")[0])

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    result: dict[str, Any] = {
        "image_bytes": layout.image_bytes,
        "estargz_image_bytes": layout.estargz_bytes,
        "image_layers": layout.layers,
        "image_files": layout.files,
        "link_mbit": mbit,
    }
    for case in CASES:
        result[f"ready_s_{case}"] = median(times[case])
    for case in CASES:
        result[f"ready_s_{case}_runs"] = [round(t, 2) for t in times[case]]
        result[f"pull_s_{case}"] = median(pulls[case])
    full, lazy = result["ready_s_full_pull"], result["ready_s_lazy"]
    result.update(
        {
            "lazy_ratio_vs_full_pull": round(lazy / full, 3) if full and lazy else None,
            "warm_image_held_s": median(held),
            "link_floor_s": round(layout.image_bytes * 8 / (mbit * 1e6), 2),
            "read_at_start_bytes": read_at_start,
            "runs": runs,
            "quick": quick,
        }
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run of each case instead of three")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--mbit", type=int, default=1000, help="the registry link's rate (Mbit/s)")
    args = parser.parse_args(argv)
    result = run(args.runs or (1 if args.quick else 3), args.mbit, args.quick)
    say(
        f"POST -> ready with {result['image_bytes'] / 1e9:.2f} GB over {result['link_mbit']} Mbit/s: "
        f"full pull {result['ready_s_full_pull']} s (the link alone: {result['link_floor_s']} s), "
        f"warm {result['ready_s_warm']} s, lazy {result['ready_s_lazy']} s "
        f"({result['lazy_ratio_vs_full_pull']} of the full pull's); a warm image held "
        f"{result['warm_image_held_s']} s after the admin's POST, then ready in {result['ready_s_warm_image']} s"
    )
    emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
