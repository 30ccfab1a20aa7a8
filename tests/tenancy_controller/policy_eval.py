"""A small, pure evaluator of the generated policies: does a flow pass?

It interprets a CiliumNetworkPolicy (cilium.io/v2) and a Kubernetes
NetworkPolicy the way Cilium and the NetworkPolicy spec define them, for the
rule shapes the controller produces (and fails loudly on a shape it does not
know, so a builder change cannot silently slip past):

* a direction is default-deny once a rule of that direction selects the pod;
  without any policy, everything is allowed;
* Cilium ``toEndpoints``/``fromEndpoints`` match only Cilium-managed pods;
  a selector without ``k8s:io.kubernetes.pod.namespace`` means the policy's
  namespace; ``toCIDR``/``toCIDRSet`` never match pods or cluster nodes;
  ``toEntities`` world/host/remote-node/kube-apiserver/cluster/all;
  ``toFQDNs`` matches a destination reached by a name the pod looked up;
  ``egressDeny`` wins over every allow; ``toPorts`` narrows by port/protocol;
* NetworkPolicy ``podSelector``/``namespaceSelector`` peers match pods,
  ``ipBlock`` matches non-pod addresses (cidr minus except);
* a flow between two pods must pass the source's egress and the destination's
  ingress.

Run ``python -m tests.tenancy_controller.policy_eval`` to print the README table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NS_LABEL = "k8s:io.kubernetes.pod.namespace"


@dataclass(frozen=True)
class Peer:
    """One end of a flow."""

    ip: str
    kind: str  # pod | host | remote-node | kube-apiserver | external
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    fqdn: str | None = None  # the name the source resolved to reach it, if any

    @property
    def is_pod(self) -> bool:
        return self.kind == "pod"


@dataclass(frozen=True)
class Flow:
    src: Peer
    dst: Peer
    port: int
    protocol: str = "TCP"


class UnknownRule(AssertionError):
    """The evaluator met a rule shape it does not interpret."""


def _in_cidr(ip: str, cidr: str, excepts: Sequence[str] = ()) -> bool:
    addr = ipaddress.ip_address(ip)
    net = ipaddress.ip_network(cidr, strict=False)
    if addr.version != net.version or addr not in net:
        return False
    return not any(
        addr.version == ipaddress.ip_network(e, strict=False).version and addr in ipaddress.ip_network(e, strict=False)
        for e in excepts
    )


# -- Cilium -------------------------------------------------------------------------------


def _cilium_selector_matches(selector: Mapping[str, Any], peer: Peer, policy_ns: str) -> bool:
    if not peer.is_pod:
        return False
    unknown = set(selector) - {"matchLabels"}
    if unknown:
        raise UnknownRule(f"endpoint selector keys {unknown}")
    labels = dict(selector.get("matchLabels") or {})
    ns = labels.pop(NS_LABEL, policy_ns)
    if peer.namespace != ns:
        return False
    for key, value in labels.items():
        if not key.startswith("k8s:"):
            raise UnknownRule(f"label without source prefix: {key}")
        if peer.labels.get(key[len("k8s:") :]) != value:
            return False
    return True


def _cilium_entity_matches(entity: str, peer: Peer) -> bool:
    if entity == "all":
        return True
    if entity == "world":
        return peer.kind == "external"
    if entity == "cluster":
        return peer.kind != "external"
    if entity in ("host", "remote-node", "kube-apiserver"):
        return peer.kind == entity
    raise UnknownRule(f"entity {entity}")


def _cilium_ports_match(to_ports: Sequence[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not to_ports:
        return True
    for item in to_ports:
        for p in item.get("ports") or []:
            proto = p.get("protocol", "ANY")
            if int(p["port"]) == port and proto in (protocol, "ANY"):
                return True
    return False


def _cilium_peer_matches(rule: Mapping[str, Any], peer: Peer, policy_ns: str, *, egress: bool) -> bool:
    known = (
        {"toEndpoints", "toCIDR", "toCIDRSet", "toEntities", "toFQDNs", "toPorts"}
        if egress
        else {"fromEndpoints", "fromCIDR", "fromCIDRSet", "fromEntities", "toPorts"}
    )
    if set(rule) - known:
        raise UnknownRule(f"rule keys {set(rule) - known}")
    d = "to" if egress else "from"
    peer_keys = [k for k in rule if k != "toPorts"]
    if not peer_keys:
        return True
    if any(_cilium_selector_matches(s, peer, policy_ns) for s in rule.get(f"{d}Endpoints") or []):
        return True
    cluster_managed = peer.kind != "external"  # CIDR rules never select pods or nodes
    if not cluster_managed:
        if any(_in_cidr(peer.ip, c) for c in rule.get(f"{d}CIDR") or []):
            return True
        if any(_in_cidr(peer.ip, s["cidr"], s.get("except") or ()) for s in rule.get(f"{d}CIDRSet") or []):
            return True
    if any(_cilium_entity_matches(e, peer) for e in rule.get(f"{d}Entities") or []):
        return True
    for fq in rule.get("toFQDNs") or []:
        if set(fq) - {"matchName"}:
            raise UnknownRule(f"toFQDNs keys {set(fq)}")
        if peer.fqdn is not None and peer.fqdn == fq["matchName"] and not cluster_managed:
            return True
    return False


def _cilium_allows(
    policies: Sequence[Mapping[str, Any]], pod: Peer, other: Peer, port: int, protocol: str, *, egress: bool
) -> bool:
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace]
    for p in selecting:
        if p["spec"].get("endpointSelector") != {}:
            raise UnknownRule("only endpointSelector {} is interpreted")
    direction = "egress" if egress else "ingress"
    rules = [(p, r) for p in selecting for r in p["spec"].get(direction) or []]
    denies = [(p, r) for p in selecting for r in p["spec"].get(f"{direction}Deny") or []]
    for p, r in denies:
        if _cilium_peer_matches(r, other, p["metadata"]["namespace"], egress=egress) and _cilium_ports_match(
            r.get("toPorts"), port, protocol
        ):
            return False
    if not rules and not denies:
        return True  # not selected in this direction: default allow
    return any(
        _cilium_peer_matches(r, other, p["metadata"]["namespace"], egress=egress)
        and _cilium_ports_match(r.get("toPorts"), port, protocol)
        for p, r in rules
    )


def cilium_allows(policies: Sequence[Mapping[str, Any]], flow: Flow) -> bool:
    """Whether Cilium, with these CiliumNetworkPolicies in force, passes ``flow``."""
    for p in policies:
        assert p["apiVersion"] == "cilium.io/v2" and p["kind"] == "CiliumNetworkPolicy", p["kind"]
    if flow.src.is_pod and not _cilium_allows(policies, flow.src, flow.dst, flow.port, flow.protocol, egress=True):
        return False
    if flow.dst.is_pod and not _cilium_allows(policies, flow.dst, flow.src, flow.port, flow.protocol, egress=False):
        return False
    return True


# -- Kubernetes NetworkPolicy -------------------------------------------------------------------


def _label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return True
    if set(selector) - {"matchLabels"}:
        raise UnknownRule(f"selector keys {set(selector)}")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _np_peer_matches(peer_rule: Mapping[str, Any], peer: Peer, policy_ns: str) -> bool:
    if set(peer_rule) - {"podSelector", "namespaceSelector", "ipBlock"}:
        raise UnknownRule(f"peer keys {set(peer_rule)}")
    if "ipBlock" in peer_rule:
        block = peer_rule["ipBlock"]
        return not peer.is_pod and _in_cidr(peer.ip, block["cidr"], block.get("except") or ())
    if not peer.is_pod:
        return False
    if "namespaceSelector" in peer_rule:
        if not _label_selector_matches(peer_rule["namespaceSelector"], peer.namespace_labels):
            return False
    elif peer.namespace != policy_ns:
        return False
    return _label_selector_matches(peer_rule.get("podSelector"), peer.labels)


def _np_ports_match(ports: Sequence[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    return any(int(p["port"]) == port and p.get("protocol", "TCP") == protocol for p in ports)


def _np_allows(
    policies: Sequence[Mapping[str, Any]], pod: Peer, other: Peer, port: int, protocol: str, *, egress: bool
) -> bool:
    kind = "Egress" if egress else "Ingress"
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and _label_selector_matches(p["spec"].get("podSelector"), pod.labels)
        and kind in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    key, peers_key = ("egress", "to") if egress else ("ingress", "from")
    for p in selecting:
        for rule in p["spec"].get(key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(_np_peer_matches(x, other, p["metadata"]["namespace"]) for x in peers)
            if peer_ok and _np_ports_match(rule.get("ports"), port, protocol):
                return True
    return False


def network_policy_allows(policies: Sequence[Mapping[str, Any]], flow: Flow) -> bool:
    """Whether a NetworkPolicy implementation passes ``flow`` with these policies in force."""
    for p in policies:
        assert p["apiVersion"] == "networking.k8s.io/v1" and p["kind"] == "NetworkPolicy", p["kind"]
    if flow.src.is_pod and not _np_allows(policies, flow.src, flow.dst, flow.port, flow.protocol, egress=True):
        return False
    if flow.dst.is_pod and not _np_allows(policies, flow.dst, flow.src, flow.port, flow.protocol, egress=False):
        return False
    return True
