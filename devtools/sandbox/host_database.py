"""The database of a sandbox installed with its chart: one per state folder on the host's
PostgreSQL (``make postgres``: trust on loopback), as an external PostgreSQL is what
production runs.

Its name is derived from the state folder's path, so two sandboxes on one machine never share
tenancies or tokens; it is dropped with the cluster's etcd when the sandbox starts its
cluster empty (:mod:`devtools.sandbox.cluster`), since the records and the cluster's objects
belong together.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

PORT = 5432
PREFIX = "gpucaas_sandbox_"


def name_for(state_dir: Path) -> str:
    """``gpucaas_sandbox_<12 hex digits of the state folder's absolute path>``."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return f"{PREFIX}{digest}"


def _psql(sql: str) -> subprocess.CompletedProcess[str]:
    cmd = ["psql", "-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres", "-d", "postgres", "-Atc", sql]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def exists(name: str) -> bool:
    """True if the database is there; OSError when no PostgreSQL answers."""
    found = _psql(f"select 1 from pg_database where datname = '{name}'")
    if found.returncode != 0:
        raise OSError(f"no PostgreSQL on 127.0.0.1:{PORT} (make postgres starts it): {found.stderr.strip()}")
    return found.stdout.strip() == "1"


def ensure(state_dir: Path) -> str:
    """The state folder's database, created if missing; returns its name."""
    name = name_for(state_dir)
    if not exists(name):
        made = _psql(f"create database {name}")
        if made.returncode != 0:
            raise OSError(f"create database {name}: {made.stderr.strip()}")
    return name


def drop(state_dir: Path) -> bool:
    """Drop the state folder's database (its sessions closed first); True if one was dropped.
    Without a PostgreSQL there is nothing to drop."""
    name = name_for(state_dir)
    try:
        if not exists(name):
            return False
    except OSError:
        return False
    gone = _psql(f"drop database {name} with (force)")
    if gone.returncode != 0:
        raise OSError(f"drop database {name}: {gone.stderr.strip()}")
    return True


def url(state_dir: Path, host: str) -> str:
    """The SQLAlchemy URL of the state folder's database at ``host`` (as the pods reach it)."""
    return f"postgresql+psycopg://postgres@{host}:{PORT}/{name_for(state_dir)}"


def dump(state_dir: Path) -> bytes:
    """``pg_dump`` of the state folder's database: what a copy of it holds."""
    name = name_for(state_dir)
    cmd = ["pg_dump", "-h", "127.0.0.1", "-p", str(PORT), "-U", "postgres", "-d", name]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        raise OSError(f"pg_dump {name}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout
