"""The libvirtd tests' missing prerequisites: a failure in CI (as PostgreSQL's are), a skip elsewhere."""

from __future__ import annotations

import pytest

from tests.fabric.conftest import missing_prerequisite


def test_missing_libvirtd_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="libvirtd with QEMU unavailable: no qemu.*CI is set"):
        missing_prerequisite("libvirtd with QEMU unavailable: no qemu")


def test_missing_libvirtd_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="libvirtd with QEMU unavailable: no qemu"):
        missing_prerequisite("libvirtd with QEMU unavailable: no qemu")
