"""Remove one rule from a component's ClusterRole in the rendered chart: the sandbox fails with the 403.

This is what makes the chart's RBAC a tested contract rather than a comment: the
sandbox installs exactly the chart's cluster side, every process runs as its chart
ServiceAccount, and a permission the chart lacks stops the sandbox with the API
server's own message naming it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from devtools import folders
from devtools.ports import free_port
from devtools.processes import ProcessFailed
from devtools.sandbox import identities, runner

from .conftest import allocation_mode

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation


def _without(objects: list[dict], cluster_role: str, group: str, resource: str, verb: str) -> list[dict]:
    """``objects`` with ``verb`` on ``group/resource`` taken out of ``cluster_role``'s rules."""
    out = []
    for obj in objects:
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == cluster_role:
            rules = []
            for rule in obj["rules"]:
                if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                    rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
                if rule["verbs"]:
                    rules.append(rule)
            assert rules != obj["rules"], f"{cluster_role} grants no {verb} on {resource}"
            obj = {**obj, "rules": rules}
        out.append(obj)
    return out


def test_fabric_without_create_on_fabricstates_fails_the_sandbox() -> None:
    mode = allocation_mode()
    objects = _without(
        identities.cluster_side(identities.sandbox_values(mode)),
        "gpucaas-fabric",
        "gpucaas.dev",
        "fabricstates",
        "create",
    )
    state = Path(tempfile.mkdtemp(prefix="gpucaas-rbac-", dir="/tmp"))
    try:
        with pytest.raises((identities.RBACRefused, ProcessFailed)) as err:
            sandbox = runner.start(
                state, nodes=("gpu-node-a",), api_port=free_port(), chart_objects=objects, allocation_mode=mode
            )
            sandbox.stop()
        assert (
            'fabricstates.gpucaas.dev is forbidden: User "system:serviceaccount:gpucaas-system:gpucaas-fabric" '
            'cannot create resource "fabricstates" in API group "gpucaas.dev" at the cluster scope'
        ) in str(err.value)
    finally:
        folders.remove(state)
