"""Sandboxes with kube-proxy side by side: each claims a Service range of its own, routed into a
network namespace of its own, and a kept cluster keeps its range. The claims are real (this
machine's ``/run/gpucaas-service-ranges``, shared with any sandbox running beside the test), so
the test asserts what holds whatever else runs. Needs root (``ip netns``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from devtools.sandbox import service_range
from devtools.sandbox.service_range import OWNERS, RangeTaken, ServiceRange

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="needs root (ip netns)")


def test_addresses_of_a_range() -> None:
    first, fourth = ServiceRange(0), ServiceRange(3)
    assert (first.cidr, first.kubernetes, first.moved("10.96.0.88")) == ("10.96.0.0/16", "10.96.0.1", "10.96.0.88")
    assert (fourth.cidr, fourth.kubernetes, fourth.moved("10.96.0.10")) == ("10.99.0.0/16", "10.99.0.1", "10.99.0.10")
    with pytest.raises(ValueError, match="not in 10.96.0.0/16"):
        fourth.moved("10.97.0.1")


def routed_into(r: ServiceRange) -> str:
    """The route this machine has for an address of the range."""
    return subprocess.run(
        ["ip", "route", "get", r.moved("10.96.0.88")], capture_output=True, text=True, check=True
    ).stdout


def test_two_sandboxes_get_two_ranges_each_routed_into_its_namespace(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    a = service_range.claim(one, kept=False)
    try:
        b = service_range.claim(two, kept=False)
        try:
            assert a.index != b.index
            for r, state in ((a, one), (b, two)):
                assert (state / service_range.RECORD).read_text().strip() == str(r.index)
                assert json.loads((OWNERS / str(r.index)).read_text()) == {"pid": os.getpid(), "state": str(state)}
                assert Path("/run/netns", r.namespace).exists()
                assert f"via {r.proxy_address} dev {r.veth}" in routed_into(r)
                forwarding = subprocess.run(
                    [*service_range.in_namespace(r), "sysctl", "-n", "net.ipv4.ip_forward"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                assert forwarding.stdout.strip() == "1"
        finally:
            service_range.release(b)
        assert not Path("/run/netns", b.namespace).exists() and not (OWNERS / str(b.index)).exists()
        assert f"dev {b.veth}" not in routed_into(b)
    finally:
        service_range.release(a)


def test_a_kept_cluster_keeps_its_range_and_waits_for_no_one_else(tmp_path: Path) -> None:
    """A kept cluster's Services are in its recorded range: it gets that one again, and is told
    clearly when another running sandbox holds it; a fresh cluster takes any free one."""
    holder, kept = tmp_path / "holder", tmp_path / "kept"
    holder.mkdir()
    kept.mkdir()
    held = service_range.claim(holder, kept=False)
    try:
        (kept / service_range.RECORD).write_text(f"{held.index}\n")
        with pytest.raises(RangeTaken, match=f"{held.cidr}, which the sandbox in {holder} uses now"):
            service_range.claim(kept, kept=True)
        fresh = service_range.claim(kept, kept=False)
        assert fresh.index != held.index
        service_range.release(fresh)
    finally:
        service_range.release(held)
    again = service_range.claim(holder, kept=True)
    try:
        assert again == held
    finally:
        service_range.release(again)


def test_a_range_whose_sandbox_is_gone_is_free_again(tmp_path: Path) -> None:
    """A sandbox killed before it stopped leaves its claim and namespace: the next claim of that
    range (its process is gone) takes it and makes the namespace afresh."""
    state = tmp_path / "state"
    state.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    r = service_range.claim(state, kept=False)
    try:
        (OWNERS / str(r.index)).write_text(json.dumps({"pid": gone.pid, "state": "/tmp/a-killed-sandbox"}))
        again = service_range.claim(state, kept=True)
        assert again == r and Path("/run/netns", r.namespace).exists()
        assert f"via {r.proxy_address} dev {r.veth}" in routed_into(r)
    finally:
        service_range.release(r)
