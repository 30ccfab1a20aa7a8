"""deploy/scheduler: the KubeSchedulerConfiguration calls the verbs this extender serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from services.placement.fleet import FleetIndex
from services.placement.server import create_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "scheduler"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _extenders() -> list[tuple[str, dict[str, Any]]]:
    default = _docs("kube-scheduler-config.yaml")[0]
    config_map = next(d for d in _docs("second-scheduler.yaml") if d["kind"] == "ConfigMap")
    second = yaml.safe_load(config_map["data"]["config.yaml"])
    return [("default", default), ("second", second)]


@pytest.mark.parametrize(("which", "config"), _extenders(), ids=lambda v: v if isinstance(v, str) else "")
def test_extender_entry_matches_the_server(which: str, config: dict[str, Any]) -> None:
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    [ext] = config["extenders"]
    routes = {r.path for r in create_app(FleetIndex()).routes if "POST" in getattr(r, "methods", set())}
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        assert f"/{ext[verb]}" in routes
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["ignorable"] is False
    assert ext["urlPrefix"] == "http://gpucaas-scheduler-extender.gpucaas-system.svc:8888"
    assert 1 <= ext["weight"]
    fit = config["profiles"][0]["pluginConfig"][0]
    assert fit["name"] == "NodeResourcesFit" and fit["args"]["scoringStrategy"]["type"] == "MostAllocated"


def test_both_ways_configure_the_same_extender() -> None:
    (_, default), (_, second) = _extenders()
    assert default["extenders"] == second["extenders"]
    assert second["profiles"][0]["schedulerName"] == "gpucaas-scheduler"


def test_second_scheduler_manifests_validate() -> None:
    for doc in _docs("second-scheduler.yaml"):
        kubernetes_validate.validate(doc, "1.31.0", strict=True)
