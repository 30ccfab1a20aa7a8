"""Render the gpucaas chart with the real Helm engine and split what comes out.

Shared by the sandbox (which applies the chart's cluster side: ServiceAccounts, RBAC,
RuntimeClass, ConfigMaps) and the chart's tests (``tests/deploy``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]  # gpucaas/chart.py -> the repository
CHART = REPO / "deploy" / "helm" / "gpucaas"
PRODUCTION_VALUES = REPO / "deploy" / "values-production.yaml"
CORE_CRDS = REPO / "core" / "crds"
RELEASE = "gpucaas"
NAMESPACE = "gpucaas-system"
#: Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest
#: kubernetes-validate knows: every object must be valid for both.
KUBE_VERSIONS = ("1.28.0", "1.33.0")


def production_values() -> dict[str, Any]:
    return yaml.safe_load(PRODUCTION_VALUES.read_text())


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders with ``values`` (NOTES.txt left out)."""
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values=values or {}, name=RELEASE, namespace=NAMESPACE)
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def render_notes(values: dict[str, Any] | None = None) -> str:
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values=values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def chart_crds() -> list[dict[str, Any]]:
    """Every CRD the chart installs: Kopf's from crds/ (as the engine loads them, installed once)
    and gpucaas's own from its templates (updated by every upgrade)."""
    import helm_python

    with helm_python.Chart.load(CHART) as chart:
        entries = chart.crds
    static = [doc for entry in entries for doc in yaml.safe_load_all(entry["data"]) if doc]
    return static + [o for o in render() if o["kind"] == "CustomResourceDefinition"]


def is_hook(obj: dict[str, Any]) -> bool:
    """A Helm hook (the migration Job and its ServiceAccount, the ``helm test`` pods and their
    role): run around an install, upgrade or test, never part of what the release installs."""
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise KeyError(f"{kind}/{name} not rendered; have {[(o['kind'], o['metadata']['name']) for o in objects]}")


def workloads(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job", "Pod"))


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"] if workload["kind"] != "Pod" else workload["spec"]


def component(obj: dict[str, Any]) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]
