"""Which refusals in kube-apiserver's audit log count as a missing permission (pure)."""

from __future__ import annotations

import json
from pathlib import Path

from devtools.sandbox.identities import refusals

NODE = "system:node:gpu-node-b"
API = "system:serviceaccount:gpucaas-system:gpucaas-api"


def _event(user: str, verb: str, name: str, allowed: bool, message: str = "", resource: str = "secrets") -> dict:
    event = {
        "user": {"username": user},
        "verb": verb,
        "objectRef": {"resource": resource, "namespace": "tenant-paying", "name": name, "apiVersion": "v1"},
        "annotations": {"authorization.k8s.io/decision": "allow" if allowed else "forbid"},
    }
    if message:
        event["responseStatus"] = {"message": message}
    return event


def test_only_refusals_that_no_cache_lag_explains_count(tmp_path: Path) -> None:
    """As seen in the DRA end-to-end run: a pod bound to gpu-node-b a moment ago; the kubelet's
    list of its Secret is refused (the Node authorizer's graph has no link yet), and its
    reflector's next try, a watch, is allowed."""
    lag = (
        f'secrets "hf" is forbidden: User "{NODE}" cannot list ...: '
        "no relationship found between node 'gpu-node-b' and this object"
    )
    log = tmp_path / "audit.log"
    events = [
        _event(API, "create", "hf", False, "RoleBinding not seen yet"),  # RBAC's cache catching up ...
        _event(API, "create", "hf", True),  # ... allowed when retried
        _event(NODE, "watch", "hf", False, lag),
        _event(NODE, "list", "hf", False, lag),
        _event(NODE, "watch", "hf", True),  # the same read, allowed once the graph links them
        _event(NODE, "list", "never-mine", False, lag.replace('"hf"', '"never-mine"')),  # never allowed
        _event(API, "delete", "hf", False, "cannot delete"),  # a permission the chart lacks
        _event(API, "delete", "hf", True) | {"user": {"username": "someone-else"}},  # not the same user
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    refused = refusals(log, {NODE, API})
    assert [(e["user"], e["verb"], e["object"][3]) for e in refused] == [
        (NODE, "list", "never-mine"),
        (API, "delete", "hf"),
    ]


def test_a_nodes_read_of_a_pod_deleted_meanwhile_does_not_count(tmp_path: Path) -> None:
    """As seen under CPU contention: a tenant's pod on gpu-node-b is deleted (a cancel), the
    Node authorizer drops it from its graph, and the kubelet's status manager reads it once
    more; a pod never deleted that the node may not read still counts."""
    gone = "no relationship found between node 'gpu-node-b' and this object"
    log = tmp_path / "audit.log"
    events = [
        _event(NODE, "get", "p-1", True, resource="pods"),
        _event(API, "delete", "p-1", True, resource="pods"),
        _event(NODE, "get", "p-1", False, gone, resource="pods"),
        _event(NODE, "get", "p-2", False, gone, resource="pods"),  # never deleted: counts
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    refused = refusals(log, {NODE, API})
    assert [(e["user"], e["verb"], e["object"][3]) for e in refused] == [(NODE, "get", "p-2")]
