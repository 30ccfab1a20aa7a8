"""A local Kubernetes cluster from the pinned upstream binaries (see :mod:`.cluster`)."""

from devtools.local_cluster.binaries import KUBE_VERSION, BinariesMissing, bin_dir
from devtools.local_cluster.cluster import ClusterOptions, LocalCluster

__all__ = ["KUBE_VERSION", "BinariesMissing", "ClusterOptions", "LocalCluster", "bin_dir"]
