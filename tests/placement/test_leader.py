"""One extender replica at a time answers the partition check: leader election on a real Lease
(``services.placement.leader``). Each candidate's clock is its own, played here: a takeover needs
the record unchanged for the lease's duration on the taker's clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.kube import Kube
from services.placement.leader import LeaseElector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.cluster
def test_one_candidate_leads_and_another_takes_over_only_once_it_stops_renewing(
    k8s: Any, unique_name: Callable[[str], str]
) -> None:
    kube = Kube.of(k8s)
    namespace = unique_name("leader")
    kube.call(kube.core.create_namespace, {"metadata": {"name": namespace}})
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    a_clock, b_clock = Clock(), Clock()
    a = LeaseElector(kube, namespace, "gpucaas-partition-check", "a", lease_s=15, renew_s=5, clock=a_clock)
    b = LeaseElector(kube, namespace, "gpucaas-partition-check", "b", lease_s=15, renew_s=5, clock=b_clock)
    try:
        assert a.leading()  # made the Lease
        assert not b.leading()  # held by a, renewed just now
        lease = kube.request("GET", f"{path}/gpucaas-partition-check")
        assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 15

        # a renews every 5 s: b never sees the record still for 15 s
        for _ in range(5):
            a_clock.now += 5
            b_clock.now += 5
            assert a.leading()
            assert not b.leading()

        # a stops (it renews no more): b takes over once the record stood still for 15 s on its clock
        b_clock.now += 10
        assert not b.leading()
        b_clock.now += 5
        assert b.leading()
        lease = kube.request("GET", f"{path}/gpucaas-partition-check")
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1

        # a, back, finds the Lease taken and stops answering (it stopped anyway 15 s after its last renewal)
        a_clock.now += 20
        assert not a.leading()
    finally:
        kube.call(kube.core.delete_namespace, namespace)
