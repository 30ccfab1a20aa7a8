"""``devtools.local_cluster.objects.create_all`` leaves an existing object alone, also one whose
second create kube-apiserver refuses before it finds the name taken: a Service with a fixed
clusterIP answers 422 "provided IP is already allocated", not 409 (a second ``make sandbox`` on
its kept cluster failed there, at the cluster DNS Service)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from core.kube import new_api_client
from devtools.local_cluster.objects import create_all


@pytest.mark.cluster
def test_a_second_create_of_a_service_with_a_fixed_cluster_ip_leaves_it_alone(
    kubeconfig: Path, unique_name: Callable[[str], str]
) -> None:
    namespace = unique_name("create-all")
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "fixed", "namespace": namespace},
        "spec": {"clusterIP": "10.96.0.77", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
    }
    create_all(kubeconfig, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, service])
    with new_api_client(kubeconfig) as api:
        core = client.CoreV1Api(api)
        uid = core.read_namespaced_service("fixed", namespace).metadata.uid
        create_all(kubeconfig, [service])  # raised UnprocessibleEntityError before
        assert core.read_namespaced_service("fixed", namespace).metadata.uid == uid
        # a refusal for any other reason still raises
        other = {**service, "metadata": {"name": "other", "namespace": namespace}}
        with pytest.raises(Exception, match="already allocated"):
            create_all(kubeconfig, [other])
        core.delete_namespace(namespace)
