"""The chart-installed sandbox's database: one per state folder on the host's PostgreSQL, gone
with the cluster's state (devtools/sandbox/host_database.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from devtools.sandbox import host_database


def test_each_state_folder_names_its_own_database(tmp_path: Path) -> None:
    one, other = tmp_path / "one", tmp_path / "other"
    assert host_database.name_for(one) == host_database.name_for(tmp_path / "x" / ".." / "one")
    assert host_database.name_for(one) != host_database.name_for(other)
    assert re.fullmatch(r"gpucaas_sandbox_[0-9a-f]{12}", host_database.name_for(one))
    assert host_database.url(one, "10.96.0.54").endswith(f"@10.96.0.54:5432/{host_database.name_for(one)}")


@pytest.mark.skipif(
    shutil.which("psql") is None
    or subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"], check=False).returncode != 0,
    reason="needs make postgres",
)
def test_a_database_is_made_once_and_dropped_with_the_state(tmp_path: Path) -> None:
    name = host_database.ensure(tmp_path)
    try:
        assert host_database.exists(name)
        assert host_database.ensure(tmp_path) == name  # a second start keeps it
    finally:
        assert host_database.drop(tmp_path)
    assert not host_database.exists(name)
    assert not host_database.drop(tmp_path)  # nothing left to drop
