"""Cold start with a tenant image of a real size: POST /v1/containers -> the container's "ready" line.

Run: ``python -m benchmarks.big_image [--quick] [--runs N] [--mbit M]``.

Set-up:

* the image: :mod:`devtools.real_node.big_image`, 3.6 GB in five layers of incompressible
  content shaped like NVIDIA's PyTorch container, written once into a cache outside the work
  tree (about a minute the first time); its entry point reads about 1 MB of its files, prints
  ``ready: ...`` and exits;
* the registry that serves it sits across a link of ``--mbit`` Mbit/s (1,000 by default), a
  network namespace and ``tc`` (:mod:`devtools.real_node.slow_link`), so that a pull costs
  what it costs over a datacenter network; the image is pushed once into its storage;
* ``gpucaas sandbox`` with one real node (containerd + runc + the pinned kubelet, its device
  plugin and fabric service), whose containerd maps the image's registry name to that link.

Each run submits one 1-GPU container of the image through the API as a tenant, as a tenant
would, and takes the time from sending the POST to the moment the container printed its
``ready`` line (the timestamp containerd gave the line in the pod's log, read with
``kubectl logs --timestamps`` once the API reports the container ended; both clocks are this
machine's). The cases:

* ``full_pull``: the node does not hold the image (a fresh node, or the image removed with
  ``ctr images rm --sync``, which drops its content and snapshots): the kubelet pulls and
  containerd unpacks all of it before the process starts;
* ``warm``: the node holds the image (the run after a full pull); the API's
  ``imagePullPolicy: Always`` still asks the registry for the manifest;
* ``lazy``: a lazily pulled image (a remote snapshotter) is not built yet: ``ready_s_lazy`` is
  ``null`` and says so (docs/figures.md).

The last line of stdout is one JSON object: ``image_bytes`` (what a full pull transfers: the
compressed layers, config and manifest), ``image_layers``, ``image_files``, ``link_mbit``,
``ready_s_full_pull`` / ``ready_s_warm`` (the median of ``--runs`` runs; each run's figure in
``..._runs``), ``ready_s_lazy`` (null), ``pull_s_full`` / ``pull_s_warm`` (the kubelet's own
account of the pull, from its ``Pulled`` event), ``link_floor_s`` (``image_bytes`` at the link's
rate: no pull can be faster), ``read_at_start_bytes`` (what the entry point read),
``runs`` and ``quick``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.kit.gpucaas_api import GpucaasApi
from benchmarks.kit.report import emit, say
from benchmarks.kit.sandbox import sandbox
from benchmarks.kit.tenancies import open_tenancies, wait_ready
from core import crds
from devtools.real_node import big_image, images
from devtools.real_node.slow_link import SlowLink

TENANCY = "bigimage"
NODE = "gpu-node-a"
#: the kubelet's Pulled event: "Successfully pulled image "..." in 31.2s (31.2s including waiting)..."
PULLED = re.compile(r"Successfully pulled image .* in ([0-9.]+)(ms|s) ")
FINISHED = ("Succeeded", "Failed", "Cancelled")
#: how long one run may take: a full pull at 100 Mbit/s is about 5 minutes
RUN_DEADLINE_S = 900.0


def run_once(api: GpucaasApi, token: str, kubectl: list[str]) -> tuple[float, float | None, str]:
    """One container of the image: seconds from the POST to its ready line, the kubelet's pull
    time (None when its event says the image was present), and the line."""
    body = {"image": big_image.REFERENCE, "gpus": 1}
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


def forget_image(ctr: Path, socket: Path) -> None:
    """The node drops the image: its record, content and snapshots (the next run pulls it all)."""
    subprocess.run(
        [str(ctr), "--address", str(socket), "-n", "k8s.io", "images", "rm", "--sync", big_image.REFERENCE],
        check=False,
        capture_output=True,
    )


def run(runs: int, mbit: int, quick: bool) -> dict[str, Any]:
    say("writing the image (once; cached in " + str(big_image.cache_dir()) + ")")
    layout = big_image.cached_layout()
    link_dir = Path(f"/tmp/gpucaas-big-image-link-{time.time_ns()}")
    link = SlowLink(link_dir, big_image.cache_dir() / "registry", mbit=mbit).start()
    try:
        say(f"the far registry at {link.address}, behind {link.qdisc()}")
        _, repository, tag = images.split(big_image.REFERENCE)
        images.push(layout.path, images.Image(repository, tag), link.address)
        registry = images.split(big_image.REFERENCE)[0]
        with sandbox("gpucaas-bigimg-", nodes=(NODE,), mirrors={registry: link.address}) as sb:
            assert sb.cluster is not None
            api = GpucaasApi.of(sb)
            token = open_tenancies(api, sb.admin_token, [TENANCY], gpu_quota=8, pod_quota=20)[TENANCY]
            wait_ready(sb.kubeconfig, [TENANCY])
            kubectl = [str(sb.cluster.bin_dir / "kubectl"), "--kubeconfig", str(sb.kubeconfig)]
            node = sb.real_nodes[NODE]
            full: list[float] = []
            warm: list[float] = []
            pulls_full: list[float] = []
            pulls_warm: list[float] = []
            for i in range(runs):
                if i:
                    forget_image(sb.cluster.bin_dir / "ctr", node.containerd_socket)
                for case, into, pulls in (("full pull", full, pulls_full), ("warm", warm, pulls_warm)):
                    seconds, pull, line = run_once(api, token, kubectl)
                    say(f"run {i + 1}, {case}: ready after {seconds:.2f} s (pull {pull} s): {line}")
                    into.append(seconds)
                    if pull is not None:
                        pulls.append(pull)
    finally:
        link.stop()
        subprocess.run(["rm", "-rf", str(link_dir)], check=False)
    read_at_start = int(line.split("read ", 1)[1].split(" ")[0])

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    return {
        "image_bytes": layout.image_bytes,
        "image_layers": layout.layers,
        "image_files": layout.files,
        "link_mbit": mbit,
        "ready_s_full_pull": median(full),
        "ready_s_lazy": None,
        "ready_s_warm": median(warm),
        "ready_s_full_pull_runs": [round(s, 2) for s in full],
        "ready_s_warm_runs": [round(s, 2) for s in warm],
        "pull_s_full": median(pulls_full),
        "pull_s_warm": median(pulls_warm),
        "link_floor_s": round(layout.image_bytes * 8 / (mbit * 1e6), 2),
        "read_at_start_bytes": read_at_start,
        "runs": runs,
        "quick": quick,
    }


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
        f"warm {result['ready_s_warm']} s; lazy: not built yet"
    )
    emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
