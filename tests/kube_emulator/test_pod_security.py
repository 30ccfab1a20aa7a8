"""Pod Security admission: enforce refuses pods, warn (and enforce, for workloads) answers with Warning headers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucaas.devtools.kube_emulator import podsecurity
from tests.kube_emulator.conftest import bearer, pod_body
from tests.kube_emulator.test_authn import kubectl, needs_kubectl

RESTRICTED_OK = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "main", "image": "busybox", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
}


def labelled(core: client.CoreV1Api, name: str, **modes: str) -> None:
    labels = {f"pod-security.kubernetes.io/{mode.replace('_', '-')}": level for mode, level in modes.items()}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})


def privileged_pod(name: str = "root") -> dict:
    body = pod_body(name)
    body["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return body


def post(k8s: client.ApiClient, path: str, body: dict) -> tuple[int, dict, list[str]]:
    resp = k8s.rest_client.pool_manager.request(
        "POST", k8s.configuration.host + path, body=json.dumps(body),
        headers={"Content-Type": "application/json", **bearer(k8s)})
    return resp.status, json.loads(resp.data), resp.headers.getlist("Warning")


def test_privileged_pod_in_restricted_namespace_is_refused(core: client.CoreV1Api) -> None:
    labelled(core, "tenant-a", enforce="restricted")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("tenant-a", privileged_pod())
    assert err.value.status == 403
    status = json.loads(err.value.body)
    assert status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "root" is forbidden: violates PodSecurity "restricted:latest": '
        'privileged (container "main" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "main" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")')
    assert core.list_namespaced_pod("tenant-a").items == []


def test_compliant_pod_is_admitted_and_unlabelled_namespaces_are_privileged(core: client.CoreV1Api) -> None:
    labelled(core, "tenant-a", enforce="restricted", enforce_version="v1.31")
    core.create_namespaced_pod("tenant-a", {"metadata": {"name": "ok"}, "spec": RESTRICTED_OK})
    core.create_namespaced_pod("default", privileged_pod())


def test_baseline_refuses_host_namespaces_but_not_root(core: client.CoreV1Api) -> None:
    labelled(core, "base", enforce="baseline")
    core.create_namespaced_pod("base", pod_body("root-ok"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("base", pod_body("net", hostNetwork=True, hostPID=True))
    assert json.loads(err.value.body)["message"] == (
        'pods "net" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true, hostPID=true)')


def test_warn_level_answers_with_a_warning_header(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    labelled(core, "warned", enforce="baseline", warn="restricted")
    code, _, warnings = post(k8s, "/api/v1/namespaces/warned/pods", pod_body("p"))
    assert code == 201
    assert len(warnings) == 1 and warnings[0].startswith('299 - "would violate PodSecurity \\"restricted:latest\\": ')


def test_workloads_are_admitted_with_warnings_only(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    labelled(core, "tenant-a", enforce="restricted")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}}, "spec": privileged_pod()["spec"]}}}
    code, _, warnings = post(k8s, "/apis/apps/v1/namespaces/tenant-a/deployments", deployment)
    assert code == 201
    assert len(warnings) == 1 and 'restricted:latest' in warnings[0] and "privileged (container" in warnings[0]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {**RESTRICTED_OK, "restartPolicy": "Never"}}}}
    code, _, warnings = post(k8s, "/apis/batch/v1/namespaces/tenant-a/jobs", job)
    assert (code, warnings) == (201, [])


@pytest.mark.parametrize(("spec", "level", "reasons"), [
    ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "baseline", ["hostPath volumes"]),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "baseline", []),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "restricted", ["restricted volume types"]),
    ({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}, "baseline", ["hostPort"]),
    ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}, "baseline",
     ["non-default capabilities"]),
    ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]}, "baseline", []),
    ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "containers": []}, "baseline",
     ["forbidden sysctls"]),
    ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": []}, "baseline", ["seccompProfile"]),
    ({**RESTRICTED_OK, "securityContext": {**RESTRICTED_OK["securityContext"], "runAsUser": 0}}, "restricted",
     ["runAsUser=0"]),
    (RESTRICTED_OK, "restricted", []),
])
def test_pod_security_standards_checks(spec: dict, level: str, reasons: list[str]) -> None:
    assert [reason for reason, _ in podsecurity.evaluate(level, spec)] == reasons


@needs_kubectl
def test_kubectl_sees_the_refusal_and_the_warnings(kubeconfig: Path, core: client.CoreV1Api, tmp_path: Path) -> None:
    labelled(core, "tenant-a", enforce="restricted")
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", **privileged_pod()}))
    refused = kubectl(kubeconfig, "create", "-n", "tenant-a", "-f", str(manifest), "--validate=false")
    assert refused.returncode != 0
    assert 'pods "root" is forbidden: violates PodSecurity "restricted:latest": privileged' in refused.stderr
    warned = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", "create", "deployment", "web", "-n", "tenant-a", "--image=nginx"],
        capture_output=True, text=True, timeout=60, check=False)
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: would violate PodSecurity "restricted:latest"' in warned.stderr
