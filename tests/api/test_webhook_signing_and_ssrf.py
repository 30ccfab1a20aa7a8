"""The webhook signature scheme and its documented verifier, and the address rules.

The verifier tenants copy is taken from docs/webhooks.md itself and run; signatures are
checked against ``openssl dgst -hmac`` (an independent HMAC implementation)."""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.api.webhooks import signing, ssrf

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
SECRET = "whsec_test-secret-0123456789"
BODY = b'{"id":"evt_1","type":"container.succeeded","data":{"container":{"id":"c1"}}}'
T = 1_800_000_000


def _documented_verify() -> Any:
    text = DOC.read_text()
    section = text.split("## Verifying a delivery", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "docs/webhooks.md lost its verify snippet"
    source = code.group(1)
    assert source.startswith("def verify(")
    namespace: dict[str, Any] = {}
    exec(compile(source, str(DOC), "exec"), namespace)  # the documented recipe, run as a tenant would
    return namespace["verify"]


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body_as_openssl_computes_it() -> None:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed (Debian package openssl)")
    out = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", SECRET], input=f"{T}.".encode() + BODY, capture_output=True, check=True
    ).stdout.decode()
    expected = out.strip().rsplit(" ", 1)[-1]
    headers = signing.headers(SECRET, "evt_1", BODY, now=T)
    assert headers["Gpucaas-Webhook-Signature"] == f"v1={expected}"
    assert headers["Gpucaas-Webhook-Timestamp"] == str(T) and headers["Gpucaas-Webhook-Id"] == "evt_1"


@pytest.mark.parametrize("verify", [signing.verify, _documented_verify()], ids=["module", "docs"])
def test_the_verifier_accepts_fresh_authentic_requests_only(verify: Any) -> None:
    headers = signing.headers(SECRET, "evt_1", BODY, now=T)
    assert verify(SECRET, headers, BODY, now=T + 10)
    assert verify(SECRET, {k.lower(): v for k, v in headers.items()}, BODY, now=T)  # header case does not matter
    assert not verify(SECRET, headers, BODY + b" ", now=T)  # body changed
    assert not verify("whsec_other", headers, BODY, now=T)  # wrong secret
    assert not verify(SECRET, headers, BODY, now=T + 301)  # replayed after the 5-minute window
    assert not verify(SECRET, headers, BODY, now=T - 301)  # from the future
    assert verify(SECRET, headers, BODY, now=T + 600, tolerance=900)
    moved = dict(headers, **{"Gpucaas-Webhook-Timestamp": str(T + 100)})  # a fresh timestamp on an old signature
    assert not verify(SECRET, moved, BODY, now=T + 100)
    rotated = dict(
        headers, **{"Gpucaas-Webhook-Signature": "v1=" + "0" * 64 + " " + headers["Gpucaas-Webhook-Signature"]}
    )
    assert verify(SECRET, rotated, BODY, now=T)
    for broken in (
        {},
        {"Gpucaas-Webhook-Timestamp": "soon", "Gpucaas-Webhook-Signature": "v1=00"},
        {"Gpucaas-Webhook-Timestamp": str(T), "Gpucaas-Webhook-Signature": ""},
    ):
        assert not verify(SECRET, broken, BODY, now=T)


def test_the_documented_verifier_is_the_module_one() -> None:
    import inspect

    source = inspect.getsource(signing.verify)
    assert source in DOC.read_text()


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.0.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("100.64.0.1", "non-public"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("198.18.0.1", "private"),
    ],
)
def test_internal_addresses_are_refused_and_named(address: str, kind: str) -> None:
    with pytest.raises(ssrf.Refused, match=f"is a {kind} address"):
        ssrf.check_address(ipaddress.ip_address(address), allow_loopback=False)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    ssrf.check_address(ipaddress.ip_address(address), allow_loopback=False)


def test_allowing_loopback_allows_loopback_and_nothing_else() -> None:
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        ssrf.check_address(ipaddress.ip_address(address), allow_loopback=True)
    ssrf.check_registration("http://localhost:8080/x", allow_loopback=True)
    for address in ("10.0.0.1", "169.254.169.254", "192.168.1.1", "fe80::1"):
        with pytest.raises(ssrf.Refused):
            ssrf.check_address(ipaddress.ip_address(address), allow_loopback=True)
    with pytest.raises(ssrf.Refused, match="cluster or local name"):
        ssrf.check_registration("https://api.default.svc/x", allow_loopback=True)


def test_allowed_networks_let_their_addresses_through_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """``webhook_allow_networks``: a receiver on the operator's private range, by address or by a
    name resolving into it; its neighbours, multicast and cluster names stay refused."""
    networks = [ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_network("fd00:20::/32")]
    for address in ("10.20.3.4", "fd00:20::7", "::ffff:10.20.0.1"):
        ssrf.check_address(ipaddress.ip_address(address), allow_loopback=False, networks=networks)
    for address in ("10.21.0.1", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(ssrf.Refused, match="webhooks may only reach public addresses"):
            ssrf.check_address(ipaddress.ip_address(address), allow_loopback=False, networks=networks)
    with pytest.raises(ssrf.Refused, match="multicast"):
        ssrf.check_address(
            ipaddress.ip_address("224.0.0.1"), allow_loopback=False, networks=[ipaddress.ip_network("224.0.0.0/4")]
        )
    monkeypatch.setattr(ssrf, "resolve", lambda host, port: [ipaddress.ip_address("10.20.9.9")])
    target, address = ssrf.delivery_address("https://hooks.corp.example/x", allow_loopback=False, networks=networks)
    assert (target.host, str(address)) == ("hooks.corp.example", "10.20.9.9")
    with pytest.raises(ssrf.Refused, match="resolves to 10.20.9.9 is a private address"):
        ssrf.delivery_address("https://hooks.corp.example/x", allow_loopback=False)
    with pytest.raises(ssrf.Refused, match="cluster or local name"):
        ssrf.check_registration("https://hooks.default.svc/x", allow_loopback=False, networks=networks)


def test_the_delivery_check_resolves_and_pins_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"hooks.example.com": ["93.184.216.34"], "mixed.example.com": ["93.184.216.34", "10.1.2.3"]}

    def resolve(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(ssrf, "resolve", resolve)
    target, address = ssrf.delivery_address("https://hooks.example.com/x", allow_loopback=False)
    assert (target.host, target.port, str(address)) == ("hooks.example.com", 443, "93.184.216.34")
    with pytest.raises(ssrf.Refused, match="'mixed.example.com' resolves to 10.1.2.3 is a private address"):
        ssrf.delivery_address("https://mixed.example.com/x", allow_loopback=False)
