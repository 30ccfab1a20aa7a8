"""How gpucaas reaches a Kubernetes API server: one configuration for every component.

:class:`KubeConnection` says where the server is and how to authenticate, in one
of three ways, tried in this order:

1. explicit ``server`` (+ ``token`` or ``token_file``, ``ca_file`` or ``insecure``);
2. a kubeconfig file (``kubeconfig``, optional ``context``);
3. nothing given: the in-cluster ServiceAccount (``KUBERNETES_SERVICE_HOST`` and
   the token/CA under ``/var/run/secrets/kubernetes.io/serviceaccount``), else the
   default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``), as kubectl does.

plus the timeouts of one request (``connect_timeout_s``, ``read_timeout_s``) and
the connection pool size. :func:`load_configuration` turns it into the official
client's ``Configuration`` (urllib3's own retries off: :mod:`.retry` decides what
is retried); :func:`new_api_client` into an ``ApiClient`` (also from a kubeconfig's path: nothing else in
gpucaas makes one); :func:`kopf_connection_info`
hands the same credentials to Kopf's login handler.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes

from .connection import SERVICEACCOUNT_DIR, KubeConnection
from .errors import Unavailable

__all__ = ["SERVICEACCOUNT_DIR", "KubeConnection", "kopf_connection_info", "load_configuration", "new_api_client"]


#: the official client's own ways of making a client: only this package calls them
#: (``tests/architecture/test_one_kube_client.py`` holds every other file to that)
CLIENT_FACTORIES = ("new_client_from_config", "load_kube_config", "load_incluster_config", "ApiClient")


def load_configuration(conn: KubeConnection | None = None) -> kubernetes.client.Configuration:
    """The official client's configuration for ``conn``; :class:`Unavailable` when none can be made."""
    from kubernetes import config

    conn = conn or KubeConnection()
    cfg = kubernetes.client.Configuration()
    try:
        if conn.server:
            cfg.host = conn.server.rstrip("/")
            token = conn.token
            if token is None and conn.token_file is not None:
                token = conn.token_file.read_text().strip()
            if token:
                cfg.api_key = {"BearerToken": token}
                cfg.api_key_prefix = {"BearerToken": "Bearer"}
            if conn.ca_file is not None:
                cfg.ssl_ca_cert = str(conn.ca_file)
            cfg.verify_ssl = not conn.insecure
        elif conn.kubeconfig is not None:
            config.load_kube_config(
                config_file=str(conn.kubeconfig), context=conn.context, client_configuration=cfg, persist_config=False
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(context=conn.context, client_configuration=cfg, persist_config=False)
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise Unavailable(f"no usable Kubernetes configuration: {exc}", server=conn.server) from exc
    cfg.retries = False  # urllib3 would retry silently; the adapter's retry policy decides
    cfg.connection_pool_maxsize = conn.pool_size
    return cfg


def new_api_client(
    conn: KubeConnection | kubernetes.client.Configuration | Path | str | None = None,
) -> kubernetes.client.ApiClient:
    """An ``ApiClient`` for ``conn``: a connection, an already loaded configuration, or the path
    of a kubeconfig file (what tools and tests hold). The one place gpucaas makes one."""
    if isinstance(conn, kubernetes.client.Configuration):
        cfg = conn
    else:
        cfg = load_configuration(KubeConnection(kubeconfig=Path(conn)) if isinstance(conn, Path | str) else conn)
    return kubernetes.client.ApiClient(cfg)


def kopf_connection_info(cfg: kubernetes.client.Configuration) -> Any:
    """Kopf credentials equal to the official client's (what ``kopf.login_via_client`` derives)."""
    import kopf

    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
