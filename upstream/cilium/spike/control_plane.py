"""The throw-away control plane of the Cilium spike (docs/cilium-feasibility.md).

Run inside the spike's network namespace (``ip netns exec cilium-spike``): a LocalCluster
(etcd, kube-apiserver, kube-controller-manager; no scheduler) on that namespace's loopback, and
one Node with a pod CIDR for the agent's ``--ipam=kubernetes``. Prints the admin kubeconfig's
path, then waits until it is sent SIGTERM/SIGINT and stops its processes.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from devtools.local_cluster import LocalCluster
from devtools.local_cluster.cluster import ClusterOptions
from devtools.local_cluster.objects import create_all

NODE = "cilium-spike-node"
POD_CIDR = "10.244.0.0/24"


def main() -> None:
    folder = Path(sys.argv[1])
    cluster = LocalCluster(folder, ClusterOptions(unsafe_no_fsync=True, run_scheduler=False))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        cluster.start()
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]},
        }
        create_all(cluster.admin_kubeconfig, [node])
        print(cluster.admin_kubeconfig, flush=True)
        done.wait()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
