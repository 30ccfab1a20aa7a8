"""What the other parts of the cluster would do, done through the Kubernetes API by tests:
the tenancy controller marking a Tenancy Ready, the scheduler binding a pod, the kubelet
reporting its phase."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core import crds
from devtools.waiting import wait_for

#: a pod status whose container ``main`` runs (as a kubelet reports it)
RUNNING = {
    "phase": "Running",
    "containerStatuses": [
        {
            "name": "main",
            "ready": True,
            "restartCount": 0,
            "image": "x",
            "imageID": "",
            "state": {"running": {"startedAt": "2026-01-02T03:00:00Z"}},
        }
    ],
}
#: a pod status whose container ``main`` ended with exit code 0
SUCCEEDED = {
    "phase": "Succeeded",
    "containerStatuses": [
        {
            "name": "main",
            "ready": False,
            "restartCount": 0,
            "image": "x",
            "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-02T04:00:00Z"}},
        }
    ],
}


def ended(phase: str, *, exit_code: int, reason: str, started: str, finished: str, **more: Any) -> dict[str, Any]:
    """A pod status whose container ``main`` ran from ``started`` to ``finished`` (RFC 3339) and
    ended with ``exit_code``; ``more``: other status fields (``conditions``, ...)."""
    terminated = {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": finished}
    container = {"name": "main", "ready": False, "restartCount": 0, "image": "x", "imageID": ""}
    return {
        "phase": phase,
        "startTime": started,
        "containerStatuses": [{**container, "state": {"terminated": terminated}}],
        **more,
    }


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def mark_tenancy_ready(k8s: Any, name: str, timeout: float = 180.0) -> dict[str, Any]:
    """Wait for the API to upsert the Tenancy, then do the controller's part: namespace + Ready."""
    custom = client.CustomObjectsApi(k8s)
    core = client.CoreV1Api(k8s)

    def get() -> dict[str, Any] | None:
        try:
            return custom.get_cluster_custom_object(crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    tenancy = wait_for(get, timeout)
    ns = crds.tenant_namespace(name)
    try:
        core.create_namespace({"metadata": {"name": ns, "labels": {crds.LABEL_TENANCY: name}}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    # as the controller does: Ready once pods can be created there (kube-controller-manager's
    # ServiceAccount controller has made the namespace's default account, which admission needs;
    # a cluster started just before, on a busy machine, takes a while to sync its controllers)
    wait_for(
        lambda: _exists(lambda: core.read_namespaced_service_account("default", ns)),
        timeout,
        what=f"the default ServiceAccount of {ns}",
    )
    return custom.patch_cluster_custom_object_status(
        crds.GROUP,
        crds.VERSION,
        crds.TENANCY_PLURAL,
        name,
        {"status": {"phase": "Ready", "namespace": ns, "observedGeneration": tenancy["metadata"].get("generation", 1)}},
    )


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def get_pod(k8s: Any, namespace: str, name: str) -> dict[str, Any] | None:
    core = client.CoreV1Api(k8s)
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return k8s.sanitize_for_serialization(pod)


def list_api_pods(k8s: Any) -> list[dict[str, Any]]:
    core = client.CoreV1Api(k8s)
    pods = core.list_pod_for_all_namespaces(label_selector=crds.LABEL_CONTAINER)
    return [k8s.sanitize_for_serialization(p) for p in pods.items]


def bind_pod(k8s: Any, namespace: str, name: str, node: str) -> None:
    """The scheduler's part: bind the pod to a node."""
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod_binding(
        name,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
        _preload_content=False,
    )


def set_pod_status(k8s: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    """The kubelet's part: report the pod's status."""
    client.CoreV1Api(k8s).patch_namespaced_pod_status(name, namespace, {"status": status})
