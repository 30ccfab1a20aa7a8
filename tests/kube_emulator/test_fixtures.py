"""The shared fixtures: emulator, kubeconfig, client; ``cluster``-marked tests go to $KUBECONFIG or skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gpucaas.core.crds import crd_manifests


def test_fixtures_give_an_emulator_with_project_crds(kube_emulator, kubeconfig: Path, k8s: client.ApiClient) -> None:
    assert kube_emulator.url.startswith("http://127.0.0.1:")
    cfg = yaml.safe_load(kubeconfig.read_text())
    assert cfg["clusters"][0]["cluster"]["server"] == kube_emulator.https_url
    names = {c.metadata.name for c in client.ApiextensionsV1Api(k8s).list_custom_resource_definition().items}
    assert names == {c["metadata"]["name"] for c in crd_manifests()}


def test_kubeconfig_works_for_a_subprocess(kubeconfig: Path) -> None:
    code = (
        "from kubernetes import client, config; config.load_kube_config(); "
        "print(client.CoreV1Api().read_namespace('kube-system').metadata.name)"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "kube-system"


@pytest.mark.cluster
def test_cluster_marked_tests_use_the_real_cluster_when_given(
    kube_emulator, kubeconfig: Path, k8s: client.ApiClient, on_real_cluster: bool
) -> None:
    if on_real_cluster:
        assert kube_emulator is None
        assert str(kubeconfig) == os.environ["KUBECONFIG"].split(os.pathsep)[0]
    else:
        assert kube_emulator is not None
    assert client.CoreV1Api(k8s).read_namespace("default").metadata.name == "default"


def test_cluster_marked_tests_run_on_the_emulator_without_kubeconfig(tmp_path: Path) -> None:
    """``cluster`` tests run (on the emulator) without KUBECONFIG; ``cluster_only`` ones are skipped."""
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.cluster\ndef test_on_emulator(kube_emulator, on_real_cluster):\n"
        "    assert kube_emulator is not None and not on_real_cluster\n\n"
        "@pytest.mark.cluster\n@pytest.mark.cluster_only\ndef test_x(k8s):\n    raise AssertionError('ran')\n")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.fixtures.kube", "-p", "no:cacheprovider",
         "-o", "markers=cluster: real cluster\ncluster_only: real cluster only", "--rootdir", str(tmp_path),
         str(tmp_path / "test_marked.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 passed, 1 skipped" in out.stdout, out.stdout + out.stderr
