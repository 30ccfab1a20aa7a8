"""The GPULease state machine: legal paths, refusals, conditions and bounded history."""

from __future__ import annotations

import datetime as dt

import pytest

from core import lease_states as s

T0 = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
HOLDER = s.Holder(pod="c-1", namespace="tenant-a", tenancy="a", pod_uid="u1")


def full_cycle(status=None, holder=HOLDER):
    st = s.allocated(status or s.initial(T0), holder, T0)
    st = s.released(st, "pod Succeeded", T0 + dt.timedelta(minutes=5))
    return s.check_started(st, T0 + dt.timedelta(minutes=6))


def test_free_leased_releasing_checking_free() -> None:
    st = full_cycle()
    assert st["state"] == "Checking" and st["lastCheck"]["attempts"] == 1
    st = s.check_passed(st, "ab" * 32, "96.00.74.00.01", T0 + dt.timedelta(minutes=7))
    assert st["state"] == "Free" and st["reason"] == "CheckPassed"
    assert "holder" not in st
    assert st["history"] == [
        {
            "tenancy": "a",
            "namespace": "tenant-a",
            "pod": "c-1",
            "from": "2026-11-21T12:00:00Z",
            "to": "2026-11-21T12:05:00Z",
            "check": "Passed",
        }
    ]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Allocatable"]["status"] == "True" and conds["Quarantined"]["status"] == "False"


def test_failed_check_quarantines_and_keeps_the_evidence() -> None:
    st = s.check_failed(full_cycle(), "RomMismatch", "sha differs", "cd" * 32, "96.00.74.00.01", T0)
    assert st["state"] == "Quarantined"
    assert st["lastCheck"]["result"] == "Failed" and st["lastCheck"]["romSha256"] == "cd" * 32
    assert st["history"][-1]["check"] == "Failed: RomMismatch"
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Quarantined"]["status"] == "True" and conds["Quarantined"]["reason"] == "RomMismatch"


def test_retry_counts_attempts() -> None:
    st = s.check_started(full_cycle(), T0)
    assert st["lastCheck"]["attempts"] == 2


@pytest.mark.parametrize(
    ("make", "event"),
    [
        (lambda: s.initial(T0), lambda st: s.released(st, "x")),
        (lambda: s.initial(T0), lambda st: s.check_passed(st, "x", None)),
        (lambda: s.allocated(s.initial(T0), HOLDER), lambda st: s.check_started(st)),
        (lambda: s.allocated(s.initial(T0), HOLDER), lambda st: s.allocated(st, s.Holder("other", "tenant-b", "b"))),
        (lambda: full_cycle(), lambda st: s.allocated(st, HOLDER)),
        (lambda: s.allocated(s.initial(T0), HOLDER), lambda st: s.admin_quarantine(st, "suspect")),
        (lambda: s.initial(T0), lambda st: s.admin_release(st)),
    ],
    ids=[
        "release-free",
        "result-free",
        "check-leased",
        "steal-leased",
        "lease-checking",
        "quarantine-in-use",
        "release-not-quarantined",
    ],
)
def test_illegal_transitions_are_refused(make, event) -> None:
    with pytest.raises(s.IllegalTransition):
        event(make())


def test_same_holder_allocation_is_idempotent() -> None:
    st = s.allocated(s.initial(T0), HOLDER, T0)
    assert s.allocated(st, HOLDER, T0 + dt.timedelta(hours=1)) == st


def test_admin_quarantine_and_release() -> None:
    st = s.admin_quarantine(s.initial(T0), "fan noise", T0)
    assert st["state"] == "Quarantined" and st["reason"] == "QuarantinedByAdmin"
    assert s.admin_release(st)["state"] == "Releasing"  # re-checked before reuse
    assert s.admin_release(st, skip_check=True)["state"] == "Free"


def test_history_is_bounded() -> None:
    st = s.initial(T0)
    for i in range(s.HISTORY_LIMIT + 5):
        st = s.allocated(st, s.Holder(f"p{i}", "tenant-a", "a"), T0)
        st = s.released(st, "done", T0)
        st = s.check_started(st, T0)
        st = s.check_passed(st, "ab", "v", T0)
    assert len(st["history"]) == s.HISTORY_LIMIT
    assert st["history"][-1]["pod"] == f"p{s.HISTORY_LIMIT + 4}"
