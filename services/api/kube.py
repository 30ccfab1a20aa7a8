"""Kubernetes adapter: the official (synchronous) ``kubernetes`` client, wire dicts in and out.

Every call goes through ``_call``, which re-raises the client's errors as the API's
own (``KubeUnavailable`` when nothing answered or the server failed, so callers
retry; ``KubeNotFound``/``KubeConflict``/``KubeRejected`` for definite answers).
Reads use ``_preload_content=False`` and parse the JSON themselves, so the rest
of the service sees exactly the wire format (camelCase), never model objects.
Callers on the event loop run these methods in a thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from gpucaas.core import crds
from services.api.errors import KubeConflict, KubeError, KubeNotFound, KubeRejected, KubeUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class Kube:
    """The handful of Kubernetes operations the API needs."""

    def __init__(self, kubeconfig: Path | None = None, *, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._error: str | None = None
        self._api: Any = None
        self.core: Any = _NotConfigured()
        self.custom: Any = _NotConfigured()
        try:
            self._api = _new_api_client(kubeconfig)
        except Exception as exc:  # no configuration at all: run, but report unavailable
            self._error = f"no usable Kubernetes configuration: {exc}"
            log.warning("%s", self._error)
        if self._api is not None:
            from kubernetes import client

            self.core = client.CoreV1Api(self._api)
            self.custom = client.CustomObjectsApi(self._api)

    def close(self) -> None:
        if self._api is not None:
            self._api.close()

    # -- plumbing -------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._api is None:
            raise KubeUnavailable(self._error or "Kubernetes is not configured")
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise _translate(exc) from exc
        except (Urllib3Error, OSError) as exc:
            raise KubeUnavailable(f"Kubernetes API unreachable: {exc.__class__.__name__}: {exc}") from exc

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = self._call(fn, *args, _preload_content=False, **kwargs)
        try:
            return json.loads(resp.data)
        finally:
            resp.release_conn()

    # -- health ---------------------------------------------------------------------

    def ping(self) -> None:
        """Raise unless the API server answers a cheap list."""
        self._json(self.core.list_namespace, limit=1)

    # -- tenancies ------------------------------------------------------------------

    def get_tenancy(self, name: str) -> dict[str, Any]:
        return self._call(
            self.custom.get_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name
        )

    def upsert_tenancy(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create the Tenancy, or bring an existing one's spec to ``body['spec']``; returns it."""
        name = body["metadata"]["name"]
        try:
            current = self.get_tenancy(name)
        except KubeNotFound:
            try:
                return self._call(
                    self.custom.create_cluster_custom_object,
                    crds.GROUP,
                    crds.VERSION,
                    crds.TENANCY_PLURAL,
                    body,
                )
            except KubeConflict:  # created meanwhile by another replica
                current = self.get_tenancy(name)
        wanted = body["spec"]
        have = current.get("spec") or {}
        if all(have.get(k) == v for k, v in wanted.items()) and ("nfs" in wanted or "nfs" not in have):
            return current
        patch: dict[str, Any] = {"spec": dict(wanted)}
        if "nfs" not in wanted and "nfs" in have:
            patch["spec"]["nfs"] = None  # merge patch: remove
        return self._call(
            self.custom.patch_cluster_custom_object,
            crds.GROUP,
            crds.VERSION,
            crds.TENANCY_PLURAL,
            name,
            patch,
        )

    def delete_tenancy(self, name: str) -> None:
        try:
            self._call(
                self.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, crds.TENANCY_PLURAL, name
            )
        except KubeNotFound:
            pass

    # -- pods -----------------------------------------------------------------------

    def create_pod(self, body: dict[str, Any]) -> bool:
        """Create the pod; False when it already exists (a retried submission: success)."""
        try:
            self._call(self.core.create_namespaced_pod, body["metadata"]["namespace"], body)
            return True
        except KubeConflict:
            return False

    def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete the pod; False when it did not exist."""
        try:
            self._call(self.core.delete_namespaced_pod, name, namespace)
            return True
        except KubeNotFound:
            return False

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(self.core.read_namespaced_pod, name, namespace)

    def list_pods(self, label_selector: str) -> dict[str, Any]:
        return self._json(self.core.list_pod_for_all_namespaces, label_selector=label_selector)

    def watch_pods(
        self, label_selector: str, resource_version: str, *, on_open: Callable[[Any], None] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) from ``resource_version`` until the server ends it.

        ``on_open`` receives the raw response so another thread can shut it down.
        """
        resp = self._call(
            self.core.list_pod_for_all_namespaces,
            label_selector=label_selector,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            watch=True,
            timeout_seconds=300,
            _preload_content=False,
            _request_timeout=(self.timeout, 330),
        )
        if on_open is not None:
            on_open(resp)
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (Urllib3Error, OSError, ValueError) as exc:
            raise KubeUnavailable(f"pod watch interrupted: {exc}") from exc
        finally:
            resp.release_conn()

    def pod_log(self, namespace: str, name: str, *, follow: bool = False, tail_lines: int | None = None) -> Any:
        """The raw streaming response of the pod's log (iterate ``.stream()``; release when done)."""
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False, "container": "main"}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if follow:
            kwargs["_request_timeout"] = (self.timeout, 24 * 3600)
        return self._call(self.core.read_namespaced_pod_log, name, namespace, **kwargs)

    def list_pod_events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        """The core/v1 Events about one pod (scheduler, kubelet, device plugin)."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        return self._json(self.core.list_namespaced_event, namespace, field_selector=selector).get("items", [])

    # -- tenant Secrets (values go in, only metadata is ever read back) -------------

    def create_secret(self, body: dict[str, Any], *, replace: bool = False) -> bool:
        """Create the Secret (or, with ``replace``, overwrite it); False when it already
        existed and ``replace`` was not asked for. The response (with the data) is dropped."""
        meta = body["metadata"]
        try:
            self._call(self.core.create_namespaced_secret, meta["namespace"], body, _preload_content=False).release_conn()
            return True
        except KubeConflict:
            if not replace:
                return False
        self._call(self.core.replace_namespaced_secret, meta["name"], meta["namespace"], body,
                   _preload_content=False).release_conn()
        return True

    def list_secrets_metadata(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The Secrets' metadata only (the data is stripped here, before anyone sees it)."""
        items = self._json(self.core.list_namespaced_secret, namespace, label_selector=label_selector).get("items", [])
        return [{"metadata": i.get("metadata") or {}, "type": i.get("type")} for i in items]

    def delete_secret(self, namespace: str, name: str) -> bool:
        try:
            self._call(self.core.delete_namespaced_secret, name, namespace, _preload_content=False).release_conn()
            return True
        except KubeNotFound:
            return False

    # -- cluster inventory (admin) --------------------------------------------------

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._json(self.core.list_node).get("items", [])

    def list_cluster_objects(self, plural: str) -> list[dict[str, Any]]:
        return self._call(self.custom.list_cluster_custom_object, crds.GROUP, crds.VERSION, plural).get(
            "items", []
        )

    def get_cluster_object(self, plural: str, name: str) -> dict[str, Any]:
        return self._call(self.custom.get_cluster_custom_object, crds.GROUP, crds.VERSION, plural, name)

    def replace_cluster_object_status(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the status subresource; 409 (KubeConflict) when ``metadata.resourceVersion`` is stale."""
        return self._call(
            self.custom.replace_cluster_custom_object_status,
            crds.GROUP, crds.VERSION, plural, body["metadata"]["name"], body,
        )


class _NotConfigured:
    """Stands in for the client APIs when there is no configuration (``_call`` refuses first)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _new_api_client(kubeconfig: Path | None) -> Any:
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg, persist_config=False)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg, persist_config=False)
    # Fail fast and let our own backoff retry; urllib3's default retries hide outages.
    cfg.retries = False
    cfg.connection_pool_maxsize = 32
    return client.ApiClient(cfg)


def _translate(exc: Any) -> KubeError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", "")
    message = reason
    try:
        body = json.loads(exc.body) if exc.body else {}
        message = body.get("message") or reason
    except (TypeError, ValueError):
        pass
    text = f"{status} {message}".strip()
    if not status or status >= 500 or status == 429:
        return KubeUnavailable(text, status)
    if status == 404:
        return KubeNotFound(text, status)
    if status == 409:
        return KubeConflict(text, status)
    return KubeRejected(text, status)
