"""caasctl's volume commands with a tenant token: create, list, delete, and ``run --volume``."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from kubernetes import client

from gpucaas.caasctl.volumes import parse_volume

from .conftest import Caasctl
from .test_secrets_registry_webhooks import tenant


def test_volumes_create_list_delete(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "vcli")
    made = caasctl("volumes", "create", "datasets", "--size", "2Gi", env=me)
    assert made.exit_code == 0, made.stderr
    assert "datasets" in made.stdout and "2Gi" in made.stdout
    claim = client.CoreV1Api(kube).read_namespaced_persistent_volume_claim("gpucaas-volume-datasets", "tenant-vcli")
    assert claim.spec.resources.requests["storage"] == "2Gi"
    bad = caasctl("volumes", "create", "big", "--size", "ten", env=me)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: 422: size:"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    listed = caasctl("volumes", "list", "-o", "json", env=me)
    assert [v["name"] for v in listed.json()] == ["datasets"]
    table = caasctl("volumes", "list", env=me)
    assert "2Gi of 100Gi" in table.stdout, table.stdout
    assert caasctl("volumes", "delete", "datasets", env=me).exit_code == 0
    missing = caasctl("volumes", "delete", "nothing", env=me)
    assert missing.exit_code == 1 and missing.stderr.startswith("error: 404: volume 'nothing' not found")


def test_run_mounts_volumes_by_name(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "vrun")
    assert caasctl("volumes", "create", "work", "--size", "1Gi", env=me).exit_code == 0
    ran = caasctl("run", "busybox", "--detach", "--volume", "work:/work", "-v", "work:/again:ro", env=me)
    assert ran.exit_code == 1 and "given twice" in ran.stderr  # one volume, one mount
    ran = caasctl("run", "busybox", "--detach", "--volume", "work:/work:ro", env=me)
    assert ran.exit_code == 0, ran.stderr
    shown = caasctl("ps", "-o", "json", env=me)
    assert [c["volumes"] for c in shown.json()] == [[{"name": "work", "mount_path": "/work", "read_only": True}]]
    busy = caasctl("volumes", "delete", "work", env=me)
    assert busy.exit_code == 1 and f"in use by container(s) {ran.stdout.strip()}" in busy.stderr, busy.stderr
    unknown = caasctl("run", "busybox", "--detach", "--volume", "nope:/x", env=me)
    assert unknown.exit_code == 1 and "volume 'nope' not found" in unknown.stderr


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("data:/data", {"name": "data", "mount_path": "/data", "read_only": False}),
        ("data:/data:ro", {"name": "data", "mount_path": "/data", "read_only": True}),
        ("data:/a/b:rw", {"name": "data", "mount_path": "/a/b", "read_only": False}),
    ],
    ids=["plain", "read-only", "read-write"],
)
def test_volume_flags_parse(raw: str, expected: dict) -> None:
    assert parse_volume(raw) == expected


@pytest.mark.parametrize("raw", ["data", "data:", ":/x", "data:relative", "data:ro"])
def test_bad_volume_flags_are_usage_errors(raw: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_volume(raw)
