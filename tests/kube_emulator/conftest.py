"""Helpers for the emulator's own tests: typed API objects over the ``k8s`` fixture."""

from __future__ import annotations

import pytest
from kubernetes import client


@pytest.fixture
def core(k8s: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s)


@pytest.fixture
def custom(k8s: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s)


@pytest.fixture
def crds(k8s: client.ApiClient) -> client.ApiextensionsV1Api:
    return client.ApiextensionsV1Api(k8s)


def bearer(k8s: client.ApiClient) -> dict[str, str]:
    """The Authorization header of the ``k8s`` client, for raw HTTP requests in tests."""
    return {"Authorization": k8s.configuration.auth_settings()["BearerToken"]["value"]}


def pod_body(name: str, labels: dict[str, str] | None = None, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def lease_body(name: str = "node1-0000-18-00-0", **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "gpucaas.dev/v1alpha1",
        "kind": "GPULease",
        "metadata": {"name": name},
        "spec": {"node": "node1", "pciAddress": "0000:18:00.0", **spec},
    }
