"""The emulator's serving certificate: a throw-away CA and a server certificate it signs.

Why HTTPS at all: client-go (and so kubectl) never sends credentials over plain HTTP
(k8s.io/client-go/tools/clientcmd/client_config.go reads the user's token only when
``IsConfigTransportTLS``), so with authentication on, kubectl must reach the emulator
over TLS. The kubeconfig the emulator writes for its HTTPS address carries the CA as
``certificate-authority-data``. The material is kept with the persisted state, so a
restarted emulator keeps serving the certificate its kubeconfigs trust.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def generate(hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, str]:
    """{"ca": PEM, "cert": PEM, "key": PEM} for a server reachable as ``hosts``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpucaas-kube-emulator-ca")])
    usage = {k: False for k in ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
                                "encipher_only", "decipher_only")}
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **usage),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys((*hosts, "127.0.0.1", "localhost")):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return {"ca": ca.public_bytes(serialization.Encoding.PEM).decode(),
            "cert": cert.public_bytes(serialization.Encoding.PEM).decode(), "key": _pem_key(key)}


def server_context(material: dict[str, str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_text(material["cert"] + material["ca"])
        key.write_text(material["key"])
        key.chmod(0o600)
        ctx.load_cert_chain(cert, key)
    return ctx
