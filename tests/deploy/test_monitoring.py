"""The chart's monitoring: PodMonitors for every component that serves metrics, and alerts over
metrics the code really exports, which ``promtool`` accepts (``check rules``) and which fire on
the series they are about and stay quiet otherwise (``test rules``, with series as the
PodMonitors would scrape them: the release's namespace label on each).

promtool comes from Debian's prometheus package (`make promtool`); the test skips without it,
except in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.deploy.rendering import NAMESPACE, component, find, pod_spec, production_values, render

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"), reason="promtool absent: run `make promtool` (CI always runs this)"
)
ON = {"monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
ALERTS = {
    "GpucaasApiServerErrors",
    "GpucaasContainerQueuedTooLong",
    "GpucaasGpuQuarantined",
    "GpucaasGpuLeaseStuck",
    "GpucaasFabricManagerUnreachable",
}


def _rules(values: dict[str, Any]) -> list[dict[str, Any]]:
    rule = next(o for o in render(values) if o["kind"] == "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _exported_metric_names() -> set[str]:
    """The sample names the code's registries expose (counters with _total, histograms with
    _bucket/_sum/_count), from the API's, the device plugin's and the lease agent's metrics."""
    from services.api.edge.middleware import Metrics as ApiMetrics
    from services.device_plugin.metrics import Metrics as PluginMetrics
    from services.dra_driver.metrics import Metrics as DriverMetrics
    from services.gpu_leases.metrics import LeaseMetrics

    registries = [ApiMetrics().registry, PluginMetrics("node-a").registry, DriverMetrics("node-a").registry]
    registries.append(CollectorRegistry())
    LeaseMetrics(registries[-1], "node-a")
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        family.name + suffix
        for registry in registries
        for family in registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
def test_alerts_read_metrics_the_code_exports(mode: str) -> None:
    rules = _rules(production_values() | {"allocation": {"mode": mode}})
    assert {r["alert"] for r in rules} == ALERTS
    exported = _exported_metric_names()
    for rule in rules:
        used = set(re.findall(r"\b(gpucaas_[a-z0-9_]+)", rule["expr"]))
        assert used and used <= exported, f"{rule['alert']}: {used - exported} exported by nothing"
        assert f'namespace="{NAMESPACE}"' in rule["expr"], rule["alert"]  # this release's series only
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_node_alerts_follow_what_the_nodes_run() -> None:
    """The node alerts read the node daemon's /metrics, the device plugin's or the DRA driver's
    (none when neither runs); the fabric alert only with the fabric service, the lease alerts
    only with the lease agent."""
    names = lambda values: {r["alert"] for r in _rules(ON | values)}  # noqa: E731
    assert names({}) == ALERTS
    assert names({"allocation": {"mode": "dra"}}) == ALERTS
    api_only = {"GpucaasApiServerErrors", "GpucaasContainerQueuedTooLong"}
    assert names({"allocation": {"mode": "dra"}, "draDriver": {"enabled": False}}) == api_only
    assert names({"devicePlugin": {"enabled": False}}) == api_only
    assert "GpucaasFabricManagerUnreachable" not in names({"fabric": {"enabled": False}})
    assert not {"GpucaasGpuQuarantined", "GpucaasGpuLeaseStuck"} & names(
        {"devicePlugin": {"leases": {"enabled": False}}}
    )
    thresholds = {"apiErrorRatio": 0.2, "queuedSeconds": 60, "leaseStuckSeconds": 600}
    rules = {r["alert"]: r["expr"] for r in _rules(ON | {"monitoring": {**ON["monitoring"], "prometheusRule": {
        "enabled": True, **thresholds}}})}  # fmt: skip
    assert rules["GpucaasApiServerErrors"].endswith("> 0.2")
    assert rules["GpucaasContainerQueuedTooLong"].endswith("> 60")
    assert rules["GpucaasGpuLeaseStuck"].endswith("> 600")


@pytest.mark.parametrize(("mode", "daemon"), [("device-plugin", "device-plugin"), ("dra", "dra-driver")])
def test_pod_monitors_scrape_every_metrics_port_through_the_policies(mode: str, daemon: str) -> None:
    """A PodMonitor per component that serves /metrics, on its named port, HTTPS to the API
    verified with its TLS Secret's CA for the name its certificate holds; each port is one the
    component's NetworkPolicy admits Prometheus to."""
    objects = render(production_values() | {"allocation": {"mode": mode}})
    monitors = {component(o): o for o in objects if o["kind"] == "PodMonitor"}
    assert set(monitors) == {"api", daemon}
    prometheus = production_values()["networkPolicy"]["prometheusFrom"]
    for name, monitor in monitors.items():
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        workload = next(o for o in objects if o["kind"] in ("Deployment", "DaemonSet") and component(o) == name)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_spec_labels(workload).items()
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        port = next(p for c in pod_spec(workload)["containers"] for p in c["ports"] if p["name"] == endpoint["port"])
        policy = find(objects, "NetworkPolicy", f"gpucaas-{name}")
        rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == port["containerPort"])
        assert all(peer in rule["from"] for peer in prometheus), name
    api = monitors["api"]["spec"]["podMetricsEndpoints"][0]
    assert api["scheme"] == "https"
    assert api["tlsConfig"]["ca"] == {"secret": {"name": "gpucaas-api-tls", "key": "ca.crt"}}
    certificate = find(objects, "Certificate", "gpucaas-api-tls")
    assert api["tlsConfig"]["serverName"] in certificate["spec"]["dnsNames"]
    assert monitors[daemon]["spec"]["podMetricsEndpoints"][0]["scheme"] == "http"
    assert not [o for o in render({}) if o["apiVersion"].startswith("monitoring.coreos.com/")]


def pod_spec_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in {"namespace": NAMESPACE, **labels}.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


#: (alert, input series, eval time, the labels of each alert expected to fire then)
CASES: list[tuple[str, list[dict[str, str]], str, list[dict[str, str]]]] = [
    (
        "GpucaasApiServerErrors",
        [  # 10 % of the answers are 500s (threshold 5 %); another release's 500s do not count
            _series("gpucaas_api_requests_total", "0+10x40", method="POST", route="/v1/containers", status="500"),
            _series("gpucaas_api_requests_total", "0+90x40", method="POST", route="/v1/containers", status="202"),
            {"series": 'gpucaas_api_requests_total{namespace="other",status="503"}', "values": "0+1000x40"},
        ],
        "25m",
        [{"severity": "critical"}],
    ),
    (
        "GpucaasApiServerErrors",
        [  # 1 %: quiet
            _series("gpucaas_api_requests_total", "0+1x40", method="GET", route="/v1/containers", status="500"),
            _series("gpucaas_api_requests_total", "0+99x40", method="GET", route="/v1/containers", status="200"),
        ],
        "25m",
        [],
    ),
    (
        "GpucaasContainerQueuedTooLong",
        [  # one replica sees a container queued for 20 minutes and growing; the other none
            _series("gpucaas_api_oldest_queued_container_age_seconds", "1200+60x20", pod="api-0"),
            _series("gpucaas_api_oldest_queued_container_age_seconds", "0x20", pod="api-1"),
        ],
        "10m",
        [{"severity": "warning"}],
    ),
    (
        "GpucaasContainerQueuedTooLong",
        [_series("gpucaas_api_oldest_queued_container_age_seconds", "30x20", pod="api-0")],
        "10m",
        [],
    ),
    (
        "GpucaasGpuQuarantined",
        [
            _series("gpucaas_gpu_leases", "1x10", node="node-a", state="Quarantined"),
            _series("gpucaas_gpu_leases", "0x10", node="node-b", state="Quarantined"),
            _series("gpucaas_gpu_leases", "7x10", node="node-b", state="Free"),
        ],
        "5m",
        [{"severity": "warning", "node": "node-a"}],
    ),
    (
        "GpucaasGpuLeaseStuck",
        [  # out of service since t=0 (Releasing) and t=30m (Checking), one quarantined since t=0
            _series(
                "gpucaas_gpu_lease_out_of_service_since_timestamp_seconds",
                "0x60",
                node="node-a",
                lease="node-a-0000-18-00-0",
                state="Releasing",
            ),
            _series(
                "gpucaas_gpu_lease_out_of_service_since_timestamp_seconds",
                "1800x60",
                node="node-a",
                lease="node-a-0000-2a-00-0",
                state="Checking",
            ),
            _series(
                "gpucaas_gpu_lease_out_of_service_since_timestamp_seconds",
                "0x60",
                node="node-a",
                lease="node-a-0000-3a-00-0",
                state="Quarantined",
            ),
        ],
        "40m",
        [
            {
                "severity": "warning",
                "namespace": NAMESPACE,
                "node": "node-a",
                "lease": "node-a-0000-18-00-0",
                "state": "Releasing",
            }
        ],
    ),
    (
        "GpucaasFabricManagerUnreachable",
        [
            _series("gpucaas_device_plugin_fabric_reachable", "0x20", node="node-a"),
            _series("gpucaas_device_plugin_fabric_reachable", "1x20", node="node-b"),
        ],
        "10m",
        [{"severity": "critical", "namespace": NAMESPACE, "node": "node-a"}],
    ),
]


@needs_promtool
def test_promtool_accepts_the_rules_and_each_alert_fires_when_it_should(tmp_path: Path) -> None:
    rule = next(o for o in render(production_values()) if o["kind"] == "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run(
        [str(PROMTOOL), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in check.stdout
    # the behaviour, without the annotations (their templates are what `check rules` checked)
    bare = {"groups": [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
                       for g in rule["spec"]["groups"]]}  # fmt: skip
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(bare))
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels} for labels in firing]}
            ],
        }
        for alert, series, at, firing in CASES
    ]
    assert {c[0] for c in CASES if c[3]} == ALERTS  # each alert is seen firing at least once
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["bare.yaml"], "tests": tests}))
    run = subprocess.run(
        [str(PROMTOOL), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
