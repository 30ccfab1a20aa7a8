"""The chart's NetworkPolicies, evaluated for concrete peers as a CNI would (matchLabels
selectors, namespace selectors against the namespace's labels, ipBlocks): the configured
ingress controllers reach the API (the Ingress's, and the endpoints' for Traefik's
forwardAuth), Prometheus reaches every metrics port, nothing else gets in."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from tests.deploy.rendering import NAMESPACE, find, production_values, render


@dataclass(frozen=True)
class Peer:
    """A pod that connects: its namespace (and that namespace's labels) and its own labels."""

    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ip: str | None = None

    def namespace_matches(self, selector: dict[str, Any]) -> bool:
        return _matches(selector, {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels})


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"the evaluator knows matchLabels only: {selector}"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def admits(policy: dict[str, Any], peer: Peer, port: int) -> bool:
    """Whether ``policy`` lets ``peer`` connect to ``port`` of the pods it selects."""
    for rule in policy["spec"].get("ingress") or []:
        if rule.get("ports") and port not in [p["port"] for p in rule["ports"]]:
            continue
        if "from" not in rule:
            return True
        for source in rule["from"]:
            if "ipBlock" in source:
                if peer.ip and ipaddress.ip_address(peer.ip) in ipaddress.ip_network(source["ipBlock"]["cidr"]):
                    return True
                continue
            in_namespace = (
                peer.namespace_matches(source["namespaceSelector"])
                if "namespaceSelector" in source
                else peer.namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and _matches(source.get("podSelector") or {}, peer.labels):
                return True
    return False


NGINX = Peer("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
TRAEFIK = Peer("traefik", {"app.kubernetes.io/name": "traefik"})
PROMETHEUS = Peer("monitoring", {"app.kubernetes.io/name": "prometheus"})
HELM_TEST = Peer(
    NAMESPACE,
    {"app.kubernetes.io/name": "gpucaas", "app.kubernetes.io/instance": "gpucaas"}
    | {"app.kubernetes.io/component": "helm-test"},
)
TENANT = Peer("tenant-acme", {"app": "anything"})
STRANGER_BESIDE_NGINX = Peer("ingress-nginx", {"app.kubernetes.io/name": "something-else"})


def _policies(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    objects = render(values)
    return {
        name: find(objects, "NetworkPolicy", f"gpucaas-{name}")
        for name in ("api", "controller", "device-plugin", "fabric", "migrate", "helm-test")
    }


def test_production_admits_the_ingress_controllers_and_prometheus_only() -> None:
    policies = _policies(production_values())
    api, plugin = policies["api"], policies["device-plugin"]
    # the API's Ingress controller, Traefik asking /v1/endpoint-auth, Prometheus, `helm test`
    for peer in (NGINX, TRAEFIK, PROMETHEUS, HELM_TEST):
        assert admits(api, peer, 8443), peer
    for peer in (TENANT, STRANGER_BESIDE_NGINX, Peer("monitoring", {"app.kubernetes.io/name": "grafana"})):
        assert not admits(api, peer, 8443), peer
    assert not admits(api, NGINX, 9402)
    # the device plugin's /metrics: Prometheus alone
    assert admits(plugin, PROMETHEUS, 9402)
    assert not admits(plugin, TENANT, 9402) and not admits(plugin, TRAEFIK, 9402)
    # the rest serve no port
    for name in ("controller", "fabric", "migrate", "helm-test"):
        assert policies[name]["spec"]["ingress"] == [], name


def test_the_endpoints_ingress_controller_is_the_configured_one() -> None:
    """forwardAuth comes from whichever controller serves the endpoints: its namespace, pod
    labels and, outside the pod network, its addresses (endpoints.ingressController)."""
    values = production_values()
    values["endpoints"] = {
        **values["endpoints"],
        # (Helm merges a values map into the default's: a key of its own replaces the default's)
        "ingressController": {
            "namespace": "edge",
            "labels": {"app.kubernetes.io/name": "proxy"},
            "cidrs": ["10.0.0.5/32"],
        },
    }
    api = _policies(values)["api"]
    proxy = {"app.kubernetes.io/name": "proxy"}
    assert admits(api, Peer("edge", proxy), 8443)
    assert admits(api, Peer("kube-system", ip="10.0.0.5"), 8443)  # a controller on the hosts' network
    assert not admits(api, TRAEFIK, 8443) and not admits(api, Peer("x", ip="10.0.0.6"), 8443)
    assert not admits(api, Peer("other", proxy), 8443) and not admits(api, Peer("edge", {"app": "x"}), 8443)


def test_defaults_leave_the_api_public_and_prometheus_scrapes_anywhere() -> None:
    policies = _policies({})
    for peer in (TENANT, NGINX, TRAEFIK):
        assert admits(policies["api"], peer, 8443)
    # a prometheus-operator Prometheus in any namespace
    assert admits(policies["device-plugin"], Peer("observability", {"app.kubernetes.io/name": "prometheus"}), 9402)
    assert not admits(policies["device-plugin"], TENANT, 9402)
    closed = _policies({"networkPolicy": {"prometheusFrom": []}})
    assert closed["device-plugin"]["spec"]["ingress"] == []
