"""A cluster whose kube-scheduler allocates the DRA driver's devices.

- ``dra_cluster`` (session): a :class:`~devtools.local_cluster.LocalCluster` of its own
  (etcd, kube-apiserver, kube-controller-manager with its resourceclaim controller,
  kube-scheduler running the chart's DRA configuration,
  ``deploy/scheduler/kube-scheduler-config-dra.yaml``, without its extender: the extender only
  scores nodes, the DynamicResources plugin allocates), with the project's base objects and the
  chart's DeviceClass (one GPU a device). As the session cluster of tests/fixtures/kube.py,
  without the ServiceAccount admission plugin (a test's namespace and pods come at once).
  Kubernetes 1.36's default feature gates are what DRA needs here (device taints, binding
  conditions and device status are beta, on).
- ``dra`` (each test): a :class:`~tests.dra_driver.scheduling.Scheduling` with a fake GPU node
  and a namespace of the test's own (unique names, removed afterwards).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from core import dra as dra_names
from core.kube import new_api_client
from devtools.local_cluster import ClusterOptions, LocalCluster
from devtools.local_cluster.objects import create_all
from tests.dra_driver.scheduling import Heartbeats, Scheduling, unique
from tests.fixtures.kube import base_objects

DRA_SCHEDULER_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "scheduler" / "kube-scheduler-config-dra.yaml"


def dra_scheduler_config() -> dict[str, Any]:
    """The chart's DRA-mode KubeSchedulerConfiguration without its (scoring-only) extender."""
    cfg = yaml.safe_load(DRA_SCHEDULER_CONFIG.read_text())
    cfg.pop("extenders", None)
    return dict(cfg)


@dataclass
class DraCluster:
    cluster: LocalCluster
    k8s: client.ApiClient
    heartbeats: Heartbeats


@pytest.fixture(scope="session")
def dra_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DraCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("dra-cluster"),
        ClusterOptions(
            scheduler_config=dra_scheduler_config(),
            unsafe_no_fsync=True,
            audit_policy=None,
            apiserver_args=["--disable-admission-plugins=ServiceAccount"],
        ),
    )
    cluster.start()
    try:
        create_all(
            cluster.admin_kubeconfig,
            [*base_objects(), dra_names.device_class()],
        )
        k8s = new_api_client(cluster.admin_kubeconfig)
        heartbeats = Heartbeats(k8s).start()
        try:
            yield DraCluster(cluster, k8s, heartbeats)
        finally:
            heartbeats.stop()
            k8s.close()
    finally:
        cluster.stop()


@pytest.fixture
def dra(dra_cluster: DraCluster) -> Iterator[Scheduling]:
    """This test's GPU node and namespace on the DRA cluster."""
    s = Scheduling(
        dra_cluster.cluster, dra_cluster.k8s, dra_cluster.heartbeats, unique("gpu-node"), unique("tenant")
    ).set_up()
    try:
        yield s
    finally:
        s.tear_down()
