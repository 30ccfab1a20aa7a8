"""The extender keeps the pods of its filter calls for their binds: by UID, bounded, each
taken once, and only for the pod the bind names."""

from __future__ import annotations

from typing import Any

from services.placement.filtered import FilteredPods


def _pod(uid: str, name: str = "job", namespace: str = "tenant-acme") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace}, "spec": {}}


def test_a_filtered_pod_is_taken_once_by_its_bind() -> None:
    kept = FilteredPods()
    kept.remember(_pod("u1"))
    kept.remember(_pod("u1"))  # filtered again (a retry): one copy, the latest
    assert len(kept) == 1
    assert kept.take("u1", "tenant-acme", "job") == _pod("u1")
    assert kept.take("u1", "tenant-acme", "job") is None


def test_a_bind_naming_another_pod_or_no_uid_gets_nothing() -> None:
    kept = FilteredPods()
    kept.remember(_pod("u1"))
    kept.remember({"metadata": {"name": "no-uid"}})  # nothing to key it by: not kept
    assert len(kept) == 1
    assert kept.take("", "tenant-acme", "job") is None
    assert kept.take("u1", "tenant-other", "job") is None  # and the copy is dropped
    assert len(kept) == 0


def test_the_oldest_copies_go_first() -> None:
    kept = FilteredPods(capacity=2)
    for uid in ("u1", "u2", "u3"):
        kept.remember(_pod(uid, name=uid))
    assert kept.take("u1", "tenant-acme", "u1") is None
    assert kept.take("u3", "tenant-acme", "u3") is not None and kept.take("u2", "tenant-acme", "u2") is not None
