"""The generated policies judged as policies: each (source, destination) flow, both enforcers."""

from __future__ import annotations

import pytest

from .policy_eval import Flow, Peer, UnknownRule, cilium_allows
from .policy_table import ROWS, VARIANTS, evaluate, markdown


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
def test_flow(row, variant):
    cilium, network_policy = evaluate(variant, row.flow)
    expected = row.expected[variant]
    assert cilium == expected, f"CiliumNetworkPolicy: {row.what} in {variant}"
    assert network_policy == expected, f"NetworkPolicy: {row.what} in {variant}"


def test_without_policies_everything_passes():
    """The evaluator's baseline: the denials above come from the policies, not from the evaluator."""
    a = Peer(ip="10.244.1.10", kind="pod", namespace="tenant-a")
    assert cilium_allows([], Flow(a, Peer(ip="169.254.169.254", kind="external"), 80))


def test_unknown_rule_shape_is_refused():
    policy = {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"namespace": "tenant-a"},
        "spec": {"endpointSelector": {}, "egress": [{"toServices": [{}]}]},
    }
    a = Peer(ip="10.244.1.10", kind="pod", namespace="tenant-a")
    with pytest.raises(UnknownRule):
        cilium_allows([policy], Flow(a, Peer(ip="1.1.1.1", kind="external"), 443))


def test_readme_table_renders():
    table = markdown()
    assert table.count("\n") == len(ROWS) + 1
    assert "cilium" not in table.split("\n", 2)[2]  # both enforcers agree on every row


def test_egress_deny_holds_even_if_someone_adds_an_allow_all_rule():
    """Defence in depth: an extra allow-everything rule in the namespace still cannot reach metadata or nodes."""
    from .policy_table import A1, APISERVER, HOST, INTERNET, METADATA, policies_for

    cnps, _ = policies_for("closed")
    widened = [
        dict(p, spec={**p["spec"], "egress": [*p["spec"]["egress"], {"toEntities": ["all"]}]})
        if p["metadata"]["namespace"] == "tenant-a"
        else p
        for p in cnps
    ]
    assert cilium_allows(widened, Flow(A1, INTERNET, 443))  # the rule did widen egress...
    for dst in (METADATA, HOST, APISERVER):  # ...but not to these
        assert not cilium_allows(widened, Flow(A1, dst, 443)), dst
