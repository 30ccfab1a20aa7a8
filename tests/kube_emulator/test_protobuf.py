"""Content types: protobuf bodies (kubectl >= 1.32) decoded; protobuf-or-JSON Accept answered in JSON.

client-go sends built-in objects as protobuf when its rest.Config says so (kubectl >= 1.32
does) and has no fallback to JSON after a 415 for protobuf (only for CBOR), so the
emulator decodes them with the Kubernetes descriptors a kubectl binary carries
(gpucaas/devtools/kube_emulator/protobuf.py); without such a binary it answers 415.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from kubernetes import client

from gpucaas.devtools.kube_emulator import protobuf
from tests.kube_emulator.conftest import api_call


def _protobuf_namespace(name: str) -> bytes:
    """A Namespace in Kubernetes' protobuf encoding (runtime.Unknown envelope), built with google.protobuf."""
    from google.protobuf import message_factory

    pool = protobuf.kubernetes_descriptors()
    ns = message_factory.GetMessageClass(pool.FindMessageTypeByName("k8s.io.api.core.v1.Namespace"))()
    ns.metadata.name = name
    ns.metadata.labels["team"] = "a"
    unknown = message_factory.GetMessageClass(pool.FindMessageTypeByName("k8s.io.apimachinery.pkg.runtime.Unknown"))()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "v1", "Namespace"
    unknown.raw = ns.SerializeToString()
    return protobuf.MAGIC + unknown.SerializeToString()


def test_protobuf_body_is_decoded(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    if protobuf.kubernetes_descriptors() is None:
        status, _, body = api_call(k8s, "POST", "/api/v1/namespaces", body=b"k8s\x00\n\x00",
                                   headers={"Content-Type": protobuf.MEDIA_TYPE})
        assert status == 415 and body["reason"] == "UnsupportedMediaType"
        pytest.skip("no Kubernetes protobuf descriptors on this machine (no kubectl): 415 checked")
    status, headers, body = api_call(k8s, "POST", "/api/v1/namespaces", body=_protobuf_namespace("from-proto"),
                                     headers={"Content-Type": protobuf.MEDIA_TYPE,
                                              "Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 201, body
    assert headers["Content-Type"].startswith("application/json")
    ns = core.read_namespace("from-proto")
    assert ns.metadata.labels["team"] == "a" and ns.status.phase == "Active"
    status, _, body = api_call(k8s, "POST", "/api/v1/namespaces", body=b"not protobuf",
                               headers={"Content-Type": protobuf.MEDIA_TYPE})
    assert status == 400 and "k8s" in body["message"]


def test_json_is_answered_to_protobuf_accept(k8s: client.ApiClient) -> None:
    status, headers, body = api_call(k8s, "GET", "/api/v1/namespaces/default",
                                     headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert status == 200 and body["metadata"]["name"] == "default"
    assert headers["Content-Type"].startswith("application/json")


def test_yaml_bodies_are_accepted(k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    status, _, body = api_call(k8s, "POST", "/api/v1/namespaces/default/configmaps",
                               body="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\ndata: {k: v}\n",
                               headers={"Content-Type": "application/yaml"})
    assert status == 201, body
    assert core.read_namespaced_config_map("y", "default").data == {"k": "v"}


def _kubectl_releases() -> list[Path]:
    """The stock kubectl and, in the Cloud SDK layout, its kubectl.1.NN siblings from 1.32 on (protobuf)."""
    exe = shutil.which("kubectl")
    if exe is None:
        return []
    real = Path(exe).resolve()
    newer = [p for p in real.parent.glob("kubectl.1.*") if int(re.findall(r"\d+", p.name)[-1]) >= 32]
    return [Path(exe), *sorted(newer)]


def test_kubectl_create_namespace_and_deployment(kubectl, kubeconfig, tmp_path,  # type: ignore[no-untyped-def]
                                                 k8s: client.ApiClient, core: client.CoreV1Api) -> None:
    import os
    import subprocess

    for i, exe in enumerate(_kubectl_releases()):
        ns = f"team-{i}"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(tmp_path / f"cache{i}"),
               "HOME": str(tmp_path)}

        def run(*args: str, exe: Path = exe, env: dict = env) -> str:
            proc = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True)
            assert proc.returncode == 0, f"{exe.name} {' '.join(args)}: {proc.stderr}"
            return proc.stdout

        assert f"namespace/{ns} created" in run("create", "namespace", ns)
        assert core.read_namespace(ns).status.phase == "Active"
        assert "deployment.apps/d created" in run("create", "deployment", "d", "--image=x", "--replicas=2", "-n", ns)
        dep = client.AppsV1Api(k8s).read_namespaced_deployment("d", ns)
        assert dep.spec.replicas == 2 and dep.spec.template.spec.containers[0].image == "x"
        assert dep.metadata.managed_fields[0].manager == "kubectl-create"
        assert json.loads(run("get", "deployment", "d", "-n", ns, "-o", "json"))["spec"]["selector"] == \
            {"matchLabels": {"app": "d"}}
