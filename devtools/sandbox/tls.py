"""A throw-away certificate authority and server certificate for the sandbox's HTTPS API.

Clients trust ``ca.pem`` (``curl --cacert``, ``caasctl --ca-cert``); the API serves
``server.pem``/``server-key.pem`` for ``localhost`` and ``127.0.0.1``, and the ingress
controller serves ``endpoints.pem``/``endpoints-key.pem``, a wildcard for the endpoint
domain (``*.<domain>``), as its default certificate. Kept across sandbox runs so a client
configured once keeps working (all made anew when one is missing).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: the sandbox's endpoint domain: containers' ports are served at https://<id>-<port>.<this>
ENDPOINT_DOMAIN = "endpoints.gpucaas.test"


@dataclass(frozen=True)
class TLSFiles:
    ca_cert: Path
    cert: Path
    key: Path
    endpoint_cert: Path
    endpoint_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def ensure_self_signed(
    directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"), endpoint_domain: str = ENDPOINT_DOMAIN
) -> TLSFiles:
    """Create (once) a CA, a server certificate and the endpoint wildcard signed by it under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "endpoints.pem",
        directory / "endpoints-key.pem",
    )
    if all(p.exists() for p in (files.ca_cert, files.cert, files.key, files.endpoint_cert, files.endpoint_key)):
        return files

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpucaas sandbox CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(names: tuple[str, ...], cert_path: Path, key_path: Path) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for host in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=90))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)

    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    leaf(hosts, files.cert, files.key)
    leaf((f"*.{endpoint_domain}",), files.endpoint_cert, files.endpoint_key)
    return files
