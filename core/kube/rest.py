"""The light path to Kubernetes: a few JSON calls over HTTPS, without the official client.

Node daemons (the fabric service's FabricState publisher, the GPU-lease node agent) make
a handful of calls: get/create/replace/patch one custom object, read one pod, post an
Event or an Eviction. Importing the official ``kubernetes`` package for them costs about
35 MB resident (its ~600 generated model modules load with the package), more than the
rest of such a daemon; :class:`RestKube` makes the same calls with urllib3 (already the
official client's transport) and answers with the wire JSON.

It offers the part of :class:`~core.kube.Kube`'s interface those daemons use,
with the same meaning: ``call(fn, *args, what=, idempotent=)`` (errors translated to
:mod:`.errors`, :class:`Unavailable` retried per the :class:`RetryPolicy` when
idempotent), ``request(method, path, ...)``, ``custom`` (the methods of the official
``CustomObjectsApi`` named below, same positional arguments) and ``server``.

Configuration follows :class:`KubeConnection` exactly as :func:`.config.load_configuration`
does: an explicit server; else a kubeconfig file; else the in-cluster ServiceAccount
(``KUBERNETES_SERVICE_HOST``/``_PORT``, token re-read as the kubelet rotates it, CA);
else ``$KUBECONFIG`` / ``~/.kube/config``. From a kubeconfig: ``server``,
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, and ``token``,
``tokenFile``, ``client-certificate(-data)``/``client-key(-data)`` or basic auth — the
fields client-go's ``clientcmd`` reads for these. A user with an ``exec`` or
``auth-provider`` plugin needs the official client: :func:`.adapters.connect` then returns a
:class:`~core.kube.Kube` instead (this module never imports it).

Paths and verbs are the Kubernetes API's (``/apis/<group>/<version>/<plural>/<name>/status``,
merge patch as ``application/merge-patch+json``; kubernetes.io/docs/reference/using-api/api-concepts/).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from .connection import SERVICEACCOUNT_DIR, KubeConnection
from .errors import Unavailable, from_status, from_transport_error
from .retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy, retrying

T = TypeVar("T")
log = logging.getLogger(__name__)
TOKEN_REREAD_S = 60.0  # a projected ServiceAccount token is rotated well before it expires


class HTTPStatusError(Exception):
    """The HTTP answer behind a :mod:`.errors` exception of :class:`RestKube` (its ``__cause__``, as
    the official client's ``ApiException`` is for :class:`~core.kube.Kube`)."""

    def __init__(self, status: int, reason: str | None, body: str) -> None:
        super().__init__(f"({status}) {reason or ''}".strip())
        self.status = status
        self.reason = reason
        self.body = body


class NeedsFullClient(Unavailable):
    """The configuration uses something only the official client implements (exec/auth-provider)."""


class _Target:
    """Server URL, TLS context and credentials, resolved once from a :class:`KubeConnection`."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: str | None = None,
        ca_data: str | None = None,
        insecure: bool = False,
        token: str | None = None,
        token_file: str | None = None,
        cert: tuple[str | None, str | None, str | None, str | None] = (None, None, None, None),
        basic: tuple[str, str] | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.insecure = insecure
        self._token = token
        self._token_file = token_file
        self._token_read_at = 0.0
        self._lock = threading.Lock()
        self._basic = basic
        self.ssl_context: ssl.SSLContext | None = None
        if self.server.startswith("https://"):
            ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            cert_file, cert_data, key_file, key_data = cert
            if cert_file or cert_data:
                _load_client_cert(ctx, cert_file, cert_data, key_file, key_data)
            self.ssl_context = ctx

    def headers(self) -> dict[str, str]:
        if self._token_file is not None:
            with self._lock:
                now = time.monotonic()
                if self._token is None or now - self._token_read_at > TOKEN_REREAD_S:
                    self._token = Path(self._token_file).read_text().strip()
                    self._token_read_at = now
        if self._token:
            return {"Authorization": f"Bearer {self._token}"}
        if self._basic is not None:
            raw = base64.b64encode(f"{self._basic[0]}:{self._basic[1]}".encode()).decode()
            return {"Authorization": f"Basic {raw}"}
        return {}


def _load_client_cert(
    ctx: ssl.SSLContext, cert_file: str | None, cert_data: str | None, key_file: str | None, key_data: str | None
) -> None:
    """``load_cert_chain`` reads files only: inline data goes through private temporary files."""
    made: list[str] = []
    try:

        def as_file(path: str | None, data: str | None) -> str | None:
            if data is None:
                return path
            fd, name = tempfile.mkstemp(prefix="gpucaas-kube-", suffix=".pem")
            made.append(name)
            with os.fdopen(fd, "wb") as f:
                f.write(base64.b64decode(data))
            return name

        certfile = as_file(cert_file, cert_data)
        keyfile = as_file(key_file, key_data)
        assert certfile is not None
        ctx.load_cert_chain(certfile, keyfile)
    finally:
        for name in made:
            os.unlink(name)


def _named(items: list[dict[str, Any]] | None, name: str | None, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise Unavailable(f"kubeconfig has no {what} named {name!r}")


def _from_kubeconfig(path: Path, context: str | None) -> _Target:
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    base = path.parent

    def rel(p: str | None) -> str | None:
        return None if p is None else str(base / p) if not os.path.isabs(p) else p

    ctx_name = context or doc.get("current-context")
    ctx = _named(doc.get("contexts"), ctx_name, "context")
    cluster = _named(doc.get("clusters"), ctx.get("cluster"), "cluster")
    user = _named(doc.get("users"), ctx["user"], "user") if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise NeedsFullClient(f"kubeconfig user {ctx.get('user')!r} uses a credential plugin")
    ca_data = cluster.get("certificate-authority-data")
    return _Target(
        cluster["server"],
        ca_file=rel(cluster.get("certificate-authority")),
        ca_data=base64.b64decode(ca_data).decode() if ca_data else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=user.get("token"),
        token_file=rel(user.get("tokenFile")),
        cert=(
            rel(user.get("client-certificate")),
            user.get("client-certificate-data"),
            rel(user.get("client-key")),
            user.get("client-key-data"),
        ),
        basic=(user["username"], user.get("password", "")) if user.get("username") else None,
    )


def resolve(conn: KubeConnection) -> _Target:
    """Where and how, in :func:`.config.load_configuration`'s order; :class:`Unavailable` if nowhere."""
    try:
        if conn.server:
            return _Target(
                conn.server,
                ca_file=str(conn.ca_file) if conn.ca_file else None,
                insecure=conn.insecure,
                token=conn.token,
                token_file=str(conn.token_file) if conn.token is None and conn.token_file else None,
            )
        if conn.kubeconfig is not None:
            return _from_kubeconfig(Path(conn.kubeconfig), conn.context)
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if host:
            host = f"[{host}]" if ":" in host else host
            return _Target(
                f"https://{host}:{port}",
                ca_file=str(SERVICEACCOUNT_DIR / "ca.crt"),
                token_file=str(SERVICEACCOUNT_DIR / "token"),
            )
        env = os.environ.get("KUBECONFIG")
        candidates = [Path(p) for p in env.split(os.pathsep) if p] if env else [Path.home() / ".kube" / "config"]
        for path in candidates:
            if path.exists():
                return _from_kubeconfig(path, conn.context)
        raise Unavailable("no usable Kubernetes configuration: no server, kubeconfig or in-cluster ServiceAccount")
    except Unavailable:
        raise
    except (OSError, ValueError, KeyError, TypeError, ssl.SSLError) as exc:
        raise Unavailable(f"no usable Kubernetes configuration: {exc}", server=conn.server) from exc


class _CustomObjects:
    """The cluster-scoped methods of the official ``CustomObjectsApi`` that node daemons use."""

    def __init__(self, kube: RestKube) -> None:
        self.kube = kube

    @staticmethod
    def _path(group: str, version: str, plural: str, name: str | None = None, sub: str | None = None) -> str:
        path = f"/apis/{group}/{version}/{plural}"
        if name is not None:
            path += "/" + quote(name, safe="")
        return path + (f"/{sub}" if sub else "")

    def list_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        query = [(k, v) for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v]
        return self.kube.send("GET", self._path(group, version, plural), query=query)

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **_: Any) -> dict[str, Any]:
        return self.kube.send("GET", self._path(group, version, plural, name))

    def create_cluster_custom_object(
        self, group: str, version: str, plural: str, body: dict[str, Any], **_: Any
    ) -> dict[str, Any]:
        return self.kube.send("POST", self._path(group, version, plural), body=body)

    def replace_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: dict[str, Any], **_: Any
    ) -> dict[str, Any]:
        return self.kube.send("PUT", self._path(group, version, plural, name, "status"), body=body)

    def patch_cluster_custom_object_status(
        self, group: str, version: str, plural: str, name: str, body: Any, **_: Any
    ) -> dict[str, Any]:
        # As the official client: a list is a JSON patch, an object a JSON merge patch.
        kind = "application/json-patch+json" if isinstance(body, list) else "application/merge-patch+json"
        return self.kube.send("PATCH", self._path(group, version, plural, name, "status"), body=body, content_type=kind)


class RestKube:
    """The light adapter: :class:`~core.kube.Kube`'s calls for node daemons, wire JSON in and out."""

    def __init__(
        self,
        connection: KubeConnection | None = None,
        *,
        timeout: tuple[float, float] | float | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        import urllib3

        conn = connection or KubeConnection()
        self.connection = conn
        self._target = resolve(conn)
        self.timeout = timeout if timeout is not None else conn.request_timeout
        self.retry = retry
        kw: dict[str, Any] = {"retries": False, "maxsize": min(conn.pool_size, 4), "block": False}
        if self._target.ssl_context is not None:
            kw["ssl_context"] = self._target.ssl_context
            if self._target.insecure:
                kw.update(cert_reqs="CERT_NONE", assert_hostname=False)
        self._http = urllib3.PoolManager(num_pools=2, **kw)
        self._errors: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)
        connect, read = self.timeout if isinstance(self.timeout, tuple) else (self.timeout, self.timeout)
        self._timeout = urllib3.Timeout(connect=connect, read=read)
        self.custom = _CustomObjects(self)

    @property
    def server(self) -> str:
        return self._target.server

    def close(self) -> None:
        self._http.clear()

    def __enter__(self) -> RestKube:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def translated(self, what: str = "") -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            raise from_transport_error(exc, what=what, server=self.server) from exc

    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        what: str | None = None,
    ) -> dict[str, Any]:
        """One request, no retry: the JSON answer, or the :mod:`.errors` exception for its status."""
        what = what or f"{method} {path}"
        url = self.server + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json", **self._target.headers()}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        with self.translated(what):
            resp = self._http.request(
                method, url, body=data, headers=headers, timeout=self._timeout, retries=False, redirect=False
            )
        raw = resp.data
        if not 200 <= resp.status <= 299:
            text = raw.decode("utf-8", "replace")
            raise from_status(
                resp.status, text, what=what, server=self.server, reason=resp.reason
            ) from HTTPStatusError(resp.status, resp.reason, text)
        return json.loads(raw) if raw else {}

    def stream(self, path: str, *, query: list[tuple[str, str]] | None = None, read_timeout_s: float) -> Any:
        """GET ``path`` unread: the urllib3 response, to read as it comes (a watch); no retry.
        A status other than 2xx raises its :mod:`.errors` exception."""
        import urllib3

        what = f"GET {path}"
        url = self.server + path + ("?" + urlencode(query) if query else "")
        with self.translated(what):
            resp = self._http.request(
                "GET",
                url,
                headers={"Accept": "application/json", **self._target.headers()},
                preload_content=False,
                retries=False,
                redirect=False,
                timeout=urllib3.Timeout(connect=self._timeout.connect_timeout, read=read_timeout_s),
            )
            if not 200 <= resp.status <= 299:
                text = resp.read().decode("utf-8", "replace")
                resp.release_conn()
                raise from_status(
                    resp.status, text, what=what, server=self.server, reason=resp.reason
                ) from HTTPStatusError(resp.status, resp.reason, text)
        return resp

    def call(
        self, fn: Callable[..., T], *args: Any, what: str | None = None, idempotent: bool = False, **kwargs: Any
    ) -> T:
        """``fn(*args, **kwargs)`` (a method of ``custom``) with retries when idempotent."""
        kwargs.pop("_request_timeout", None)
        kwargs.pop("_preload_content", None)
        label = what or str(getattr(fn, "__name__", "kubernetes call"))
        return retrying(lambda: fn(*args, **kwargs), self.retry if idempotent else NO_RETRY, what=label)

    def json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.call(fn, *args, **kwargs)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        idempotent: bool | None = None,
    ) -> dict[str, Any]:
        """A raw JSON request on ``path``; GET/PUT/DELETE count as idempotent unless said otherwise."""
        what = f"{method} {path}"
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "PUT", "DELETE")
        return retrying(
            lambda: self.send(method, path, body=body, query=query, content_type=content_type, what=what),
            self.retry if idempotent else NO_RETRY,
            what=what,
        )


def stream_lines(resp: Any, chunk_size: int = 8192) -> Iterator[bytes]:
    """The non-empty lines of a streamed urllib3 response (a watch answers one JSON event per
    line, split across chunks at any byte)."""
    buf = b""
    for chunk in resp.stream(chunk_size, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
