"""caasctl's ``run --port``: declared ports become endpoints, printed by run and shown by ps."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from gpucaas.caasctl.tenant import parse_port

from .conftest import Caasctl
from .test_secrets_registry_webhooks import tenant


def test_run_declares_ports_and_ps_shows_their_urls(caasctl: Caasctl, kube: Any) -> None:
    me = tenant(caasctl, kube, "pcli")
    ran = caasctl("run", "busybox", "--detach", "--port", "8080", "-p", "6006:public", env=me)
    assert ran.exit_code == 0, ran.stderr
    cid = ran.stdout.strip()
    shown = caasctl("ps", "-o", "json", env=me).json()
    assert shown[0]["ports"] == [{"port": 8080, "public": False}, {"port": 6006, "public": True}]
    urls = [e["url"] for e in shown[0]["endpoints"]]
    assert urls == [f"https://{cid}-8080.endpoints.gpucaas.internal", f"https://{cid}-6006.endpoints.gpucaas.internal"]
    assert f"port 8080: {urls[0]} (private)" in ran.stderr and f"port 6006: {urls[1]}\n" in ran.stderr
    table = caasctl("ps", env=me)
    assert "ENDPOINTS" in table.stdout and f"{cid}-8080" in table.stdout, table.stdout
    twice = caasctl("run", "busybox", "--detach", "--port", "8080", "--port", "8080:public", env=me)
    assert twice.exit_code == 1 and "port 8080 is given twice" in twice.stderr, twice.stderr


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("8080", {"port": 8080, "public": False}),
        ("8080:public", {"port": 8080, "public": True}),
        ("1:private", {"port": 1, "public": False}),
    ],
    ids=["private", "public", "private-said"],
)
def test_port_flags_parse(raw: str, expected: dict) -> None:
    assert parse_port(raw) == expected


@pytest.mark.parametrize("raw", ["", "http", "0", "65536", "8080:open", "-1", "80:80"])
def test_bad_port_flags_are_usage_errors(raw: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_port(raw)
