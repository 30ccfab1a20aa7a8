"""The activation store's journal: every change durable as one appended line, folded into
the snapshot on open and every ``COMPACT_AFTER`` changes, safe across crashes at any point."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.fabric import bookkeeping
from services.fabric.bookkeeping import Activation, ActivationStore
from services.fabric.errors import StateError


def rec(name: str, *pids: int) -> Activation:
    return Activation(holder=name, gpus=(f"0000:{pids[0]:02x}:00.0",), partition_ids=pids, physical_ids=pids)


def holders(state: Path) -> list[str]:
    with ActivationStore(state, boot_id="b") as store:
        return [a.holder for a in store.book]


def test_changes_are_journaled_and_folded_on_open(tmp_path: Path) -> None:
    with ActivationStore(tmp_path, boot_id="b") as store:
        store.put(rec("a", 7))
        store.put(rec("b", 8))
        store.remove("a")
        store.set_pod("b", "tenant-x/pod-1")
        assert len(store.journal_path.read_bytes().splitlines()) == 4  # one line per change
    # a crash now (no close-time work exists) loses nothing: reopening replays the journal
    with ActivationStore(tmp_path, boot_id="b") as store:
        assert [(a.holder, a.pod) for a in store.book] == [("b", "tenant-x/pod-1")]
        assert store.journal_path.read_bytes() == b""  # folded into the snapshot


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    with ActivationStore(tmp_path, boot_id="b") as store:
        store.put(rec("a", 7))
        store.put(rec("b", 8))
    with open(tmp_path / bookkeeping.JOURNAL_FILE, "ab") as f:  # a crash in the middle of an append
        f.write(b'{"op":"remove","hol')
    assert holders(tmp_path) == ["a", "b"]
    assert holders(tmp_path) == ["a", "b"]  # and the torn line is gone after the fold


def test_replaying_a_journal_already_in_the_snapshot_changes_nothing(tmp_path: Path) -> None:
    with ActivationStore(tmp_path, boot_id="b") as store:
        store.put(rec("a", 7))
        store.put(rec("b", 8))
        store.remove("a")
        store.put(rec("a", 9))
        journal = store.journal_path.read_bytes()
        store.save()  # snapshot written ...
    (tmp_path / bookkeeping.JOURNAL_FILE).write_bytes(journal)  # ... but a crash before the journal was emptied
    with ActivationStore(tmp_path, boot_id="b") as store:
        assert {a.holder: a.partition_ids for a in store.book} == {"a": (9,), "b": (8,)}


def test_a_damaged_line_before_the_last_is_an_error(tmp_path: Path) -> None:
    with ActivationStore(tmp_path, boot_id="b") as store:
        store.put(rec("a", 7))
    with open(tmp_path / bookkeeping.JOURNAL_FILE, "ab") as f:
        f.write(b"not json\n" + b'{"op":"remove","holder":"a"}\n')
    with pytest.raises(StateError, match="line 1"):
        ActivationStore(tmp_path, boot_id="b").open()


def test_the_journal_is_compacted_after_enough_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bookkeeping, "COMPACT_AFTER", 3)
    with ActivationStore(tmp_path, boot_id="b") as store:
        for i in range(7):
            store.put(rec(f"h{i}", i + 1))
        assert len(store.journal_path.read_bytes().splitlines()) <= 3  # never more than COMPACT_AFTER
    assert holders(tmp_path) == [f"h{i}" for i in range(7)]


def test_journal_of_an_earlier_boot_is_dropped_with_its_snapshot(tmp_path: Path) -> None:
    with ActivationStore(tmp_path, boot_id="boot-1") as store:
        store.put(rec("a", 7))
    with ActivationStore(tmp_path, boot_id="boot-2") as store:
        assert store.discarded_stale and len(store.book) == 0


def test_a_record_with_every_field_set_survives_the_journal(tmp_path: Path) -> None:
    """``Activation.to_json`` is written by hand (no deep copy): no field may be left out."""
    from dataclasses import fields, replace
    from datetime import UTC, datetime

    full = replace(
        rec("a", 7, 8),
        pod="t/p",
        nvlink=True,
        releasing=True,
        lost="fabric reset",
        lost_at=datetime(2026, 11, 23, tzinfo=UTC),
    )
    assert set(full.to_json()) == {f.name for f in fields(Activation)}
    with ActivationStore(tmp_path, boot_id="b") as store:
        store.put(full)
    with ActivationStore(tmp_path, boot_id="b") as store:
        assert list(store.book) == [full]
