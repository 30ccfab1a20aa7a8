"""Certificates and keys made on this machine: one CA per folder and the certificates it signs.

The local cluster's: its CA, the API server's serving certificate, client certificates for
the admin and the control-plane components, the service-account signing key pair, and
kubeconfigs that carry them; kept in the cluster's folder and reused while they are valid, so
a kubeconfig written once keeps working across restarts of the same cluster. The sandbox's
HTTPS API and endpoints (:mod:`devtools.sandbox.tls`) and the tests' kubelet log double have a
CA of their own made here too.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
#: Names the API server answers to: loopback and the in-cluster Service names (with the
#: ``kubernetes`` Service's address, the first of the cluster's Service range).
SERVING_NAMES = (
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=not ca,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


class PKI:
    """The certificate files under ``folder``: a CA named ``ca_name`` and what it signs."""

    def __init__(self, folder: Path, ca_name: str = "gpucaas local cluster CA") -> None:
        self.folder = folder
        self.ca_name = ca_name
        self.ca = Pair(folder / "ca.pem", folder / "ca-key.pem")
        self.sa_public = folder / "sa.pub"
        self.sa_private = folder / "sa-key.pem"

    def ensure_ca(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.ca.cert.exists() and self.ca.key.exists():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.ca_name)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        _write(self.ca.key, _key_pem(key))
        _write(self.ca.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)

    def ensure_service_account_keys(self) -> None:
        """The key pair kube-apiserver signs and checks service-account tokens with."""
        if self.sa_private.exists() and self.sa_public.exists():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        _write(self.sa_private, _key_pem(key))
        _write(
            self.sa_public,
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
            0o644,
        )

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        groups: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        client: bool = True,
    ) -> Pair:
        """A certificate signed by the CA (``<name>.pem``/``<name>-key.pem``), made once.

        A client certificate's CN is the user and its O entries the groups, as kube-apiserver reads them.
        """
        pair = Pair(self.folder / f"{name}.pem", self.folder / f"{name}-key.pem")
        if pair.cert.exists() and pair.key.exists():
            return pair
        self.ensure_ca()
        ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        now = dt.datetime.now(dt.UTC)
        usages = ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else []) + (
            [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server_names:
            sans: list[x509.GeneralName] = []
            for host in server_names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        _write(pair.key, _key_pem(key))
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        return pair

    def kubeconfig(
        self, path: Path, server: str, user: str, *, pair: Pair | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig for ``server`` trusting the CA, authenticating with a client certificate or a token."""
        b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
        creds: dict[str, str] = (
            {"token": token}
            if token
            else {"client-certificate-data": b64(pair.cert), "client-key-data": b64(pair.key)}
            if pair
            else {}
        )
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": server, "certificate-authority-data": b64(self.ca.cert)}}
            ],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, yaml.safe_dump(doc, sort_keys=False).encode())
        return path
