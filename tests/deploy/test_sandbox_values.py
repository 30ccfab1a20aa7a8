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
