"""A cluster of its own with Kueue's manager and its webhooks (:mod:`devtools.kueue`), for the
module: Kueue's CRDs, roles and webhook configurations stay on it, and the session's cluster is
reset to its set-up state after each test. Needs ``make kueue``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from core.kube import new_api_client
from devtools.kueue import Kueue
from devtools.local_cluster import ClusterOptions, LocalCluster


@dataclass
class Queued:
    cluster: LocalCluster
    kueue: Kueue
    core: client.CoreV1Api
    custom: client.CustomObjectsApi


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queued]:
    base = tmp_path_factory.mktemp("kueue")
    # no kube-scheduler: admitted pods stay Pending, unscheduled (admission is Kueue's, not a node's);
    # no ServiceAccount admission, as in the session's cluster: a namespace and its pods at once
    cluster = LocalCluster(
        base / "cluster",
        ClusterOptions(
            unsafe_no_fsync=True,
            run_scheduler=False,
            audit_policy=None,
            apiserver_args=["--disable-admission-plugins=ServiceAccount"],
        ),
    )
    kueue = Kueue(cluster, base / "kueue")
    try:
        cluster.start()
        kueue.start()
        with new_api_client(cluster.admin_kubeconfig) as api:
            yield Queued(cluster, kueue, client.CoreV1Api(api), client.CustomObjectsApi(api))
    finally:
        kueue.stop()
        cluster.stop()
