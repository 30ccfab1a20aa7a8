"""Creating objects on a cluster and waiting until the API server serves them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def create_all(kubeconfig: Path, manifests: list[dict[str, Any]], *, timeout: float = 60.0) -> None:
    """Create each object (an existing one is left alone); waits for each CRD to be
    Established before going on, so that objects of its kinds can follow in the same list."""
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ConflictError, ResourceNotFoundError, UnprocessibleEntityError

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        dyn = dynamic.DynamicClient(api)
        for m in manifests:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    res = dyn.resources.get(api_version=m["apiVersion"], kind=m["kind"])
                    res.create(body=m, namespace=m["metadata"].get("namespace"))
                    break
                except ConflictError:
                    break
                except UnprocessibleEntityError:
                    # kube-apiserver may refuse a second create before it finds the name taken: a
                    # Service with a fixed clusterIP answers "provided IP is already allocated"
                    if not _exists(res, m):
                        raise
                    break
                except ResourceNotFoundError:  # a CRD just created: discovery catches up
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
                    dyn = dynamic.DynamicClient(api)
            if m["kind"] == "CustomResourceDefinition":
                _wait_established(dyn, m["metadata"]["name"], deadline)


def _exists(res: Any, manifest: dict[str, Any]) -> bool:
    from kubernetes.dynamic.exceptions import NotFoundError

    try:
        res.get(name=manifest["metadata"]["name"], namespace=manifest["metadata"].get("namespace"))
    except NotFoundError:
        return False
    return True


def replace_all(kubeconfig: Path, manifests: list[dict[str, Any]]) -> None:
    """Create each object, or replace the one of that name with it (objects whose content is
    the caller's alone, such as an EndpointSlice it manages)."""
    from kubernetes import dynamic
    from kubernetes.dynamic.exceptions import ConflictError

    from core.kube import new_api_client

    with new_api_client(kubeconfig) as api:
        dyn = dynamic.DynamicClient(api)
        for m in manifests:
            res = dyn.resources.get(api_version=m["apiVersion"], kind=m["kind"])
            namespace = m["metadata"].get("namespace")
            try:
                res.create(body=m, namespace=namespace)
            except ConflictError:
                current = res.get(name=m["metadata"]["name"], namespace=namespace)
                body = {**m, "metadata": {**m["metadata"], "resourceVersion": current.metadata.resourceVersion}}
                res.replace(body=body, namespace=namespace)


def established(crd: dict[str, Any]) -> bool:
    """Whether the API server serves a CRD's kinds (it has no conditions just after it is made)."""
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _wait_established(dyn: Any, name: str, deadline: float) -> None:
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    while time.monotonic() < deadline:
        if established(crds.get(name=name).to_dict()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} was not Established in time")


#: The RuntimeClass tenant pods name. The chart's templates create it; the objects a cluster
#: holds before them (the chart's CRDs, Cilium's) are ``devtools.sandbox.cluster.cluster_objects()``,
#: which this floor cannot import (programs sit above the development tools).
RUNTIME_CLASS: dict[str, Any] = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "kata-qemu-nvidia-gpu"},
    "handler": "kata-qemu-nvidia-gpu",
}
