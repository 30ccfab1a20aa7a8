"""The sandbox's API certificate: made for the chart's API Service names too, and made again,
under the same CA, when a kept one lacks a name (a state folder from before)."""

from __future__ import annotations

import ssl
from pathlib import Path

from devtools.sandbox.tls import API_NAMES, certificate_names as names, ensure_self_signed


def test_a_kept_certificate_lacking_a_name_is_made_again_under_the_same_ca(tmp_path: Path) -> None:
    old = ensure_self_signed(tmp_path, hosts=("localhost", "127.0.0.1"))
    ca = old.ca_cert.read_bytes()
    assert "gpucaas-api.gpucaas-system.svc" not in names(old.cert)

    new = ensure_self_signed(tmp_path)

    assert names(new.cert) == set(API_NAMES)
    assert new.ca_cert.read_bytes() == ca
    context = ssl.create_default_context(cafile=str(new.ca_cert))
    context.load_cert_chain(new.cert, new.key)  # the key was made again with the certificate


def test_a_certificate_with_every_name_is_kept(tmp_path: Path) -> None:
    first = ensure_self_signed(tmp_path).cert.read_bytes()
    assert ensure_self_signed(tmp_path).cert.read_bytes() == first
