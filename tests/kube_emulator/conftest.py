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


def api_call(k8s: client.ApiClient, method: str, path: str, *, body: object = None,
             headers: dict[str, str] | None = None, query: dict[str, str] | None = None) -> tuple[int, object, object]:
    """One raw request with the official client's configuration (host, auth, TLS): (status, headers, JSON body).

    ``body`` bytes/str are sent as they are (YAML, protobuf, JSON with duplicate keys); anything
    else as JSON.
    """
    import json

    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    _, url, all_headers, _, _ = k8s.param_serialize(method, path, query_params=list((query or {}).items()),
                                                    header_params=headers, auth_settings=["BearerToken"])
    resp = k8s.rest_client.pool_manager.request(method, url, body=body, headers=all_headers, preload_content=True)
    try:
        data = json.loads(resp.data) if resp.data else None
    except ValueError:
        data = resp.data
    return resp.status, resp.headers, data


@pytest.fixture
def kubectl(kubeconfig, tmp_path):  # type: ignore[no-untyped-def]
    """Run the stock ``kubectl`` on PATH against the emulator (skipped where none is installed)."""
    import os
    import shutil
    import subprocess

    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("no kubectl on PATH")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(tmp_path / "kube-cache"),
           "HOME": str(tmp_path)}

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([exe, *args], input=input, env=env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    return run
