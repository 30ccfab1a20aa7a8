"""Polling helpers on the Tenancy and its children through the API."""

from __future__ import annotations

from typing import Any

from services.tenancy_controller import kube

from .conftest import wait_for


def status(api: kube.KubeClient, name: str) -> dict[str, Any]:
    t = api.get("Tenancy", name)
    return (t or {}).get("status") or {}


def wait_phase(
    api: kube.KubeClient, name: str, phase: str, *, generation: int | None = None, timeout: float = 60.0
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        t = api.get("Tenancy", name) or {}
        st = t.get("status") or {}
        if st.get("phase") != phase:
            return None
        if generation is not None and st.get("observedGeneration") != generation:
            return None
        return t

    return wait_for(check, timeout=timeout, what=f"tenancy {name} phase {phase} (generation {generation})")


def conditions(tenancy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (tenancy.get("status") or {}).get("conditions") or []}


def merge_patch(api: kube.KubeClient, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    return api.request(
        "PATCH", f"/apis/gpucaas.dev/v1alpha1/tenancies/{name}", body=patch, content_type="application/merge-patch+json"
    )


def create_pod(api: kube.KubeClient, namespace: str, name: str, tenancy: str) -> dict[str, Any]:
    """A tenant pod as the API builds it, as far as Pod Security "restricted" (which tenant
    namespaces enforce) looks at it."""
    return api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"gpucaas.dev/tenancy": tenancy}},
            "spec": {
                "runtimeClassName": "kata-qemu-nvidia-gpu",
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 1000,
                    "runAsGroup": 1000,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    )
