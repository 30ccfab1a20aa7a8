"""The adapter object services hold: an ``ApiClient`` plus timeouts, retries and error translation.

``Kube.call(fn, *args, idempotent=..., **kwargs)`` runs one method of the official
client's generated APIs (``kube.core``, ``kube.custom``, ``kube.coordination``)
with the connection's (connect, read) timeout, turns every failure into the
:mod:`.errors` tree (raised ``from`` the original) and retries :class:`Unavailable`
per the :class:`RetryPolicy` when the caller marks the call idempotent.
``Kube.request`` does the same for a raw JSON request on any path (kinds the
client has no model for, e.g. CiliumNetworkPolicy). ``translated(what)`` is the
context manager for code that drives the client itself (watch streams).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import kubernetes
import urllib3

from .config import KubeConnection, load_configuration, new_api_client
from .errors import from_api_exception, from_transport_error
from .retry import DEFAULT_RETRY, NO_RETRY, RetryPolicy, retrying

T = TypeVar("T")

#: Exceptions that mean "no HTTP answer" from the official client's urllib3 transport.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)


@contextmanager
def translated(what: str = "", *, server: str | None = None) -> Iterator[None]:
    """Re-raise the official client's errors inside the block as :mod:`.errors` (chained ``from``)."""
    try:
        yield
    except kubernetes.client.ApiException as exc:
        raise from_api_exception(exc, what=what, server=server) from exc
    except TRANSPORT_ERRORS as exc:
        raise from_transport_error(exc, what=what, server=server) from exc


class Kube:
    """One configured client; thread-safe (one urllib3 pool)."""

    def __init__(
        self,
        connection: KubeConnection | kubernetes.client.Configuration | None = None,
        *,
        timeout: tuple[float, float] | float | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        api_client: kubernetes.client.ApiClient | None = None,
    ) -> None:
        if api_client is not None:
            cfg, conn = api_client.configuration, KubeConnection()
        elif isinstance(connection, kubernetes.client.Configuration):
            cfg, conn = connection, KubeConnection()
        else:
            conn = connection or KubeConnection()
            cfg = load_configuration(conn)
        self.configuration = cfg
        self.connection = conn
        self._owns_client = api_client is None
        self.api_client = api_client if api_client is not None else new_api_client(cfg)
        self.timeout: tuple[float, float] | float = timeout if timeout is not None else conn.request_timeout
        self.retry = retry
        self.core = kubernetes.client.CoreV1Api(self.api_client)
        self.custom = kubernetes.client.CustomObjectsApi(self.api_client)

    @classmethod
    def of(cls, api: Kube | kubernetes.client.ApiClient) -> Kube:
        """``api`` itself, or an adapter around an existing ``ApiClient`` (which its owner closes);
        :func:`.adapters.adapter` also passes the light :class:`.rest.RestKube` through."""
        return api if isinstance(api, Kube) else cls(api_client=api)

    @property
    def server(self) -> str:
        return str(self.configuration.host)

    def close(self) -> None:
        if self._owns_client:
            self.api_client.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def translated(self, what: str = "") -> Any:
        return translated(what, server=self.server)

    def call(
        self, fn: Callable[..., T], *args: Any, what: str | None = None, idempotent: bool = False, **kwargs: Any
    ) -> T:
        """``fn(*args, **kwargs)`` with the timeout, translated errors and (if idempotent) retries."""
        kwargs.setdefault("_request_timeout", self.timeout)
        label = what or str(getattr(fn, "__name__", "kubernetes call"))

        def once() -> T:
            with translated(label, server=self.server):
                return fn(*args, **kwargs)

        return retrying(once, self.retry if idempotent else NO_RETRY, what=label)

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

        def once() -> dict[str, Any]:
            with translated(what, server=self.server):
                m, url, hdrs, data, post = self.api_client.param_serialize(
                    method=method,
                    resource_path=path,
                    query_params=query or None,
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    auth_settings=["BearerToken"],
                )
                resp = self.api_client.call_api(
                    m, url, header_params=hdrs, body=data, post_params=post, _request_timeout=self.timeout
                )
                raw = resp.read()
                if not 200 <= resp.status <= 299:
                    raise kubernetes.client.ApiException(http_resp=resp)
            return json.loads(raw) if raw else {}

        return retrying(once, self.retry if idempotent else NO_RETRY, what=what)

    def stream(self, path: str, *, query: list[tuple[str, str]] | None = None, read_timeout_s: float) -> Any:
        """GET ``path`` unread: the urllib3 response, to read as it comes (a watch); no retry.
        A status other than 2xx raises its :mod:`.errors` exception."""
        what = f"GET {path}"
        connect = self.timeout[0] if isinstance(self.timeout, tuple) else self.timeout
        with translated(what, server=self.server):
            m, url, hdrs, _, _ = self.api_client.param_serialize(
                method="GET",
                resource_path=path,
                query_params=query or None,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            resp = self.api_client.call_api(m, url, header_params=hdrs, _request_timeout=(connect, read_timeout_s))
            if not 200 <= resp.status <= 299:
                resp.read()
                raise kubernetes.client.ApiException(http_resp=resp)
        return resp.response

    def json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Like :meth:`call` but returns the wire JSON (``_preload_content=False``), never model objects."""
        what = kwargs.pop("what", None) or getattr(fn, "__name__", "kubernetes call")
        idempotent = kwargs.pop("idempotent", False)

        def once() -> dict[str, Any]:
            resp = self.call(fn, *args, what=what, _preload_content=False, **kwargs)
            with translated(what, server=self.server):
                try:
                    return json.loads(resp.data)
                finally:
                    resp.release_conn()

        return retrying(once, self.retry if idempotent else NO_RETRY, what=what)
