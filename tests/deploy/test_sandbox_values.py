"""deploy/helm/values-sandbox.yaml chooses the simulated hardware by name: its DaemonSets mount
the fake boards' trees, never the host's /sys or /dev/vfio, and the fabric service runs the
Fabric Manager simulator on the board it is given."""

from __future__ import annotations

from typing import Any

import yaml

from .rendering import REPO, pod_spec, render, workloads

SANDBOX_VALUES = REPO / "deploy" / "helm" / "values-sandbox.yaml"
BOARD = "/var/lib/gpucaas-sandbox/board"


def _sandbox_objects() -> list[dict[str, Any]]:
    return render(yaml.safe_load(SANDBOX_VALUES.read_text()))


def _host_paths(obj: dict[str, Any]) -> set[str]:
    return {v["hostPath"]["path"] for v in pod_spec(obj).get("volumes", []) if "hostPath" in v}


def _env(obj: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for c in pod_spec(obj)["containers"] for e in c.get("env", [])}


def test_the_node_daemons_mount_the_fake_boards_not_the_hosts_hardware() -> None:
    daemonsets = {o["metadata"]["name"]: o for o in workloads(_sandbox_objects()) if o["kind"] == "DaemonSet"}
    assert set(daemonsets) == {"gpucaas-device-plugin", "gpucaas-fabric"}
    for name, ds in daemonsets.items():
        paths = _host_paths(ds)
        assert f"{BOARD}/sys" in paths and "/sys" not in paths and "/dev/vfio" not in paths, (name, paths)
    assert f"{BOARD}/dev/vfio" in _host_paths(daemonsets["gpucaas-device-plugin"])
    assert _env(daemonsets["gpucaas-device-plugin"])["GPUCAAS_DEV_ROOT"] == f"{BOARD}/dev"
    fabric = _env(daemonsets["gpucaas-fabric"])
    assert fabric["GPUCAAS_FABRIC_FM_BACKEND"] == "simulator"
    assert fabric["GPUCAAS_FABRIC_BOARD"] == f"{BOARD}/board.json"
    assert fabric["GPUCAAS_FABRIC_LIBVIRT_URI"] == "test:///default"


def test_the_default_values_mount_the_hosts_hardware() -> None:
    daemonsets = [o for o in workloads(render()) if o["kind"] == "DaemonSet"]
    for ds in daemonsets:
        assert "/sys" in _host_paths(ds) and "GPUCAAS_FABRIC_BOARD" not in _env(ds)


def _security_contexts(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """workload -> its pod's and each container's securityContext."""
    return {
        o["metadata"]["name"]: (
            pod_spec(o).get("securityContext"),
            {c["name"]: c.get("securityContext") for c in pod_spec(o)["containers"]},
        )
        for o in workloads(objects)
    }


def test_the_sandbox_keeps_the_charts_production_security_contexts() -> None:
    """The end-to-end suite runs on the chart installed with these values (tests/e2e/conftest.py):
    every workload keeps the security context of the chart's defaults (read-only root, every
    capability dropped, no privilege escalation, non-root but for the node daemons), in both
    allocation modes."""
    sandbox = yaml.safe_load(SANDBOX_VALUES.read_text())
    assert "securityContext" not in yaml.dump(sandbox)
    for extra in ({}, {"allocation": {"mode": "dra"}}):
        ours = _security_contexts(render({**sandbox, **extra}))
        production = _security_contexts(render({"schedulerExtender": {"enabled": True}, **extra}))
        assert ours == production
        for name, (pod, containers) in ours.items():
            for context in containers.values():
                assert context["readOnlyRootFilesystem"] is True, name
                assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False, name
                assert context["capabilities"] == {"drop": ["ALL"]}, name
            node_daemon = name in ("gpucaas-device-plugin", "gpucaas-dra-driver", "gpucaas-fabric")
            assert pod["runAsNonRoot"] is (not node_daemon), name
