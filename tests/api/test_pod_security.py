"""Every pod shape the API builds, checked against the Pod Security Standards.

The rules are the controls of the "Baseline" and "Restricted" profiles as the
Kubernetes documentation lists them (kubernetes.io/docs/concepts/security/
pod-security-standards/, policy version "latest" = v1.30+), read field by field;
kube-apiserver's Pod Security admission (and a real API server, see the ``cluster``
test below) enforces the same. docs/pod-security.md explains why tenant pods can
meet ``restricted`` inside a Kata VM, and what ``run_as_user=0`` gives up.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from services.api.domain import pods

#: Baseline "Capabilities": what may be added beyond the runtime's defaults.
BASELINE_CAPS = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
#: Restricted "Volume Types".
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
#: Baseline "Sysctls": the safe set.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"Host Namespaces: spec.{key}")
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            out.append(f"HostPath Volumes: {v['name']}")
    for sysctl in psc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"Sysctls: {sysctl['name']}")
    if (psc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("Seccomp: pod Unconfined")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"Privileged Containers: {c['name']}")
        if set((sc.get("capabilities") or {}).get("add", [])) - BASELINE_CAPS:
            out.append(f"Capabilities: {c['name']}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"Host Ports: {c['name']}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {c['name']}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"Seccomp: {c['name']} Unconfined")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: {c['name']}")
    return out


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    out = baseline_violations(pod)
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"Volume Types: {v['name']} {sorted(kinds)}")
    if psc.get("runAsUser") == 0:
        out.append("Running as Non-root user: pod runAsUser 0")
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {c['name']} allowPrivilegeEscalation must be false")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            out.append(f"Running as Non-root: {c['name']} runAsNonRoot must be true (pod or container)")
        if sc.get("runAsUser") == 0:
            out.append(f"Running as Non-root user: {c['name']} runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"Seccomp: {c['name']} needs RuntimeDefault or Localhost")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            out.append(f"Capabilities: {c['name']} must drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"Capabilities: {c['name']} may add only NET_BIND_SERVICE")
    return out


NFS = {"server": "10.0.0.5", "path": "/export/a", "readOnly": False, "capacity": "1Ti"}
SHAPES = list(
    itertools.product(
        [1, 8],  # GPUs
        [None, NFS, {**NFS, "readOnly": True}],  # storage
        [None, ["python", "train.py"]],  # command
        [None, 3600],  # deadline
        [None, {"WANDB_MODE": "offline"}],  # env
        ["device-plugin", "dra"],  # allocation mode (a DRA claim is no volume)
    )
)


@pytest.mark.parametrize(("gpus", "nfs", "command", "timeout", "env", "mode"), SHAPES)
def test_every_tenant_pod_shape_passes_restricted(gpus, nfs, command, timeout, env, mode) -> None:
    pod = pods.build_pod(
        container_id="c-1",
        tenancy="acme",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        gpus=gpus,
        command=command,
        timeout_seconds=timeout,
        nfs=nfs,
        env=env,
        allocation_mode=mode,
    )
    assert restricted_violations(pod) == []
    assert pod["spec"]["securityContext"]["runAsUser"] == pods.DEFAULT_RUN_AS_USER


def test_the_image_user_pod_passes_baseline_only() -> None:
    pod = pods.build_pod(container_id="c-1", tenancy="acme", image="debian:12", gpus=1, nfs=NFS, run_as_user=0)
    assert baseline_violations(pod) == []
    assert restricted_violations(pod) == ["Running as Non-root: main runAsNonRoot must be true (pod or container)"]


def test_the_checker_sees_what_restricted_forbids() -> None:
    """The rules above are no rubber stamp: each breach of a pod is named."""
    pod = pods.build_pod(container_id="c-1", tenancy="acme", image="debian:12", gpus=1)
    main = pod["spec"]["containers"][0]
    main["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    pod["spec"]["hostPID"] = True
    pod["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    found = restricted_violations(pod)
    for rule in (
        "Privileged Containers",
        "Host Namespaces",
        "HostPath Volumes",
        "Privilege Escalation",
        "Capabilities: main must drop ALL",
        "Volume Types",
    ):
        assert any(v.startswith(rule) for v in found), (rule, found)


def test_production_values_enforce_restricted_and_the_api_builds_for_it() -> None:
    """values-production.yaml: restricted tenant namespaces, and API pods with a non-root UID."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    prod = yaml.safe_load((root / "deploy/values-production.yaml").read_text())
    defaults = yaml.safe_load((root / "deploy/helm/gpucaas/values.yaml").read_text())
    level = prod.get("controller", {}).get("podSecurityLevel", defaults["controller"]["podSecurityLevel"])
    uid = prod.get("api", {}).get("tenantRunAsUser", defaults["api"]["tenantRunAsUser"])
    assert level == "restricted"
    assert uid > 0


def test_a_pod_refused_by_admission_fails_the_container_with_the_reason() -> None:
    """A 403 from admission (no "User ... cannot") is a definite refusal, an RBAC 403 is retried."""
    from core.kube import from_status
    from services.api.worker import _rejected

    psa = from_status(
        403,
        {"message": 'pods "gpucaas-x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true'},
    )
    rbac = from_status(
        403,
        {
            "message": 'pods is forbidden: User "system:serviceaccount:gpucaas-system:gpucaas-api" '
            'cannot create resource "pods" in API group "" in the namespace "tenant-a"'
        },
    )
    assert _rejected(psa) and not _rejected(rbac)
