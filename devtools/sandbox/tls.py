"""A throw-away certificate authority and server certificates for the sandbox's HTTPS API.

Clients trust ``ca.pem`` (``curl --cacert``, ``caasctl --ca-cert``); the API serves
``server.pem``/``server-key.pem`` for ``localhost``, ``127.0.0.1`` and, installed with the chart,
its Service's names (``helm test`` asks the API there, by the cluster DNS), and the ingress
controller serves ``endpoints.pem``/``endpoints-key.pem``, a wildcard for the endpoint
domain (``*.<domain>``), as its default certificate. Made by :mod:`devtools.local_cluster.pki`
(the CA's key is ``ca-key.pem``) and kept across sandbox runs so a client configured once keeps
working; all made anew when one is missing, the server's alone when it lacks a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from devtools.local_cluster.pki import PKI

#: the names the API's certificate is for: this machine's, and those of the chart's API Service
#: (the release ``gpucaas`` in ``gpucaas-system``) in the cluster
API_NAMES = (
    "localhost",
    "127.0.0.1",
    "gpucaas-api.gpucaas-system.svc",
    "gpucaas-api.gpucaas-system.svc.cluster.local",
)
#: the sandbox's endpoint domain: containers' ports are served at https://<id>-<port>.<this>
ENDPOINT_DOMAIN = "endpoints.gpucaas.test"


@dataclass(frozen=True)
class TLSFiles:
    ca_cert: Path
    cert: Path
    key: Path
    endpoint_cert: Path
    endpoint_key: Path


def ensure_self_signed(
    directory: Path, hosts: tuple[str, ...] = API_NAMES, endpoint_domain: str = ENDPOINT_DOMAIN
) -> TLSFiles:
    """Create (once) a CA, a server certificate and the endpoint wildcard signed by it under ``directory``."""
    pki = PKI(directory, ca_name="gpucaas sandbox CA")
    wildcard = f"*.{endpoint_domain}"
    files = TLSFiles(
        pki.ca.cert,
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "endpoints.pem",
        directory / "endpoints-key.pem",
    )
    every = (pki.ca.key, files.ca_cert, files.cert, files.key, files.endpoint_cert, files.endpoint_key)
    if not all(p.exists() for p in every):
        for path in every:  # a certificate left from another CA would not verify
            path.unlink(missing_ok=True)
    elif not set(hosts) <= certificate_names(files.cert):
        files.cert.unlink()
    pki.issue("server", hosts[0], server_names=hosts, client=False)
    pki.issue("endpoints", wildcard, server_names=(wildcard,), client=False)
    return files


def certificate_names(cert: Path) -> set[str]:
    """The DNS names and IP addresses a certificate is for."""
    sans = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    return {*sans.value.get_values_for_type(x509.DNSName), *map(str, sans.value.get_values_for_type(x509.IPAddress))}
