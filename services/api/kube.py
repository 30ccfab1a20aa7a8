"""Kubernetes adapter of the API: the core adapter (:mod:`core.kube`), wire dicts in and out.

Every call goes through ``_call``, which runs it through the core adapter: its
timeouts, its retries of idempotent calls, and its one error tree
(``Unavailable`` when nothing answered or the server failed, so callers retry;
``NotFound``/``Conflict``/``Forbidden``/``Invalid`` for definite answers).
Reads use ``_preload_content=False`` and parse the JSON themselves, so the rest
of the service sees exactly the wire format (camelCase), never model objects.
Callers on the event loop run these methods in a thread.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from core import crds, kueue
from core.kube import Conflict, Invalid, Kube as CoreKube, KubeConnection, KubeError, NotFound, Unavailable
from services.api.streams import exec_relay

log = logging.getLogger(__name__)
T = TypeVar("T")


class Kube:
    """The handful of Kubernetes operations the API needs."""

    def __init__(
        self, kubeconfig: Path | None = None, *, timeout: float = 10.0, connection: KubeConnection | None = None
    ) -> None:
        self.timeout = timeout
        self._error: str | None = None
        self._kube: CoreKube | None = None
        self.core: Any = _NotConfigured()
        self.custom: Any = _NotConfigured()
        conn = connection or KubeConnection(
            kubeconfig=kubeconfig, connect_timeout_s=min(5.0, timeout), read_timeout_s=timeout
        )
        try:
            self._kube = CoreKube(conn)
        except KubeError as exc:  # no configuration at all: run, but report unavailable
            self._error = str(exc)
            log.warning("%s", self._error)
        if self._kube is not None:
            self.core = self._kube.core
            self.custom = self._kube.custom

    @property
    def server(self) -> str | None:
        return self._kube.server if self._kube is not None else None

    @property
    def adapter(self) -> CoreKube | None:
        """The core adapter every call goes through (for an :class:`~core.kube.Informer`); None
        without a Kubernetes configuration."""
        return self._kube

    def close(self) -> None:
        if self._kube is not None:
            self._kube.close()

    # -- plumbing -------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], *args: Any, idempotent: bool = False, **kwargs: Any) -> T:
        if self._kube is None:
            raise Unavailable(self._error or "Kubernetes is not configured")
        return self._kube.call(fn, *args, idempotent=idempotent, **kwargs)

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self._kube is None:
            raise Unavailable(self._error or "Kubernetes is not configured")
        return self._kube.json(fn, *args, idempotent=True, **kwargs)

    # -- health ---------------------------------------------------------------------

    def ping(self) -> None:
        """Raise unless the API server answers a cheap list the API's role grants (tenancies, limit 1)."""
        self._call(
            self.custom.list_cluster_custom_object,
            crds.GROUP,
            crds.VERSION,
            crds.TENANCY_PLURAL,
            limit=1,
            what="list tenancies",
            idempotent=True,
        )

    # -- tenancies ------------------------------------------------------------------

    def get_tenancy(self, name: str, *, retry: bool = True) -> dict[str, Any]:
        return self._call(
            self.custom.get_cluster_custom_object,
            crds.GROUP,
            crds.VERSION,
            crds.TENANCY_PLURAL,
            name,
            idempotent=retry,  # a read: retried while Kubernetes does not answer, unless told not to
        )

    def upsert_tenancy(self, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        """Create the Tenancy, or bring an existing one's spec to ``body['spec']``; returns it.

        With a ``gpucaas.dev/revision`` annotation in ``body`` the resource never goes back: a
        resource already at a later revision is returned as it is, and the write is conditional
        on the resourceVersion read (a concurrent writer's change makes it read and compare
        again). Without one, the spec is written as given.

        ``retry=False``: one try of each call, no backoff when Kubernetes does not answer (a
        request handler's best-effort push, which the worker repeats anyway)."""
        name = body["metadata"]["name"]
        wanted = body["spec"]
        revision = _revision(body)
        for _ in range(_UPSERT_ROUNDS):
            try:
                current = self.get_tenancy(name, retry=retry)
            except NotFound:
                try:
                    return self._call(
                        self.custom.create_cluster_custom_object,
                        crds.GROUP,
                        crds.VERSION,
                        crds.TENANCY_PLURAL,
                        body,
                        idempotent=retry,  # a repeated create answers 409, handled below
                    )
                except Conflict:  # created meanwhile by another replica: compare with it
                    continue
            if tenancy_in_step(current, body):
                return current
            have = current.get("spec") or {}
            patch: dict[str, Any] = {"spec": dict(wanted)}
            if "nfs" not in wanted and "nfs" in have:
                patch["spec"]["nfs"] = None  # merge patch: remove
            if revision is not None:
                patch["metadata"] = {
                    "resourceVersion": current["metadata"]["resourceVersion"],  # the precondition
                    "annotations": {crds.ANNOTATION_TENANCY_REVISION: str(revision)},
                }
            try:
                return self._call(
                    self.custom.patch_cluster_custom_object,
                    crds.GROUP,
                    crds.VERSION,
                    crds.TENANCY_PLURAL,
                    name,
                    patch,
                    idempotent=retry,  # a merge patch to the same spec
                )
            except Conflict:  # changed since read (another push, the controller's status): again
                continue
        raise Conflict(f"tenancy {name!r}: its resource kept changing while it was written", status=409)

    def delete_tenancy(self, name: str) -> None:
        try:
            self._call(
                self.custom.delete_cluster_custom_object,
                crds.GROUP,
                crds.VERSION,
                crds.TENANCY_PLURAL,
                name,
                idempotent=True,
            )
        except NotFound:
            pass

    # -- pods -----------------------------------------------------------------------

    def create_pod(self, body: dict[str, Any]) -> str | None:
        """Create the pod and return its uid; None when it already exists (a retried submission:
        success)."""
        try:  # the wire JSON: building the client's V1Pod model of the answer costs more CPU than the call
            made = self._json(self.core.create_namespaced_pod, body["metadata"]["namespace"], body)
        except Conflict:
            return None
        return str((made.get("metadata") or {}).get("uid") or "")

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete the pod; its last state as the deletion answered it (its status included),
        or None when it did not exist."""
        try:
            return self._json(self.core.delete_namespaced_pod, name, namespace)
        except NotFound:
            return None

    def release_pod(self, namespace: str, name: str, finalizers: list[str]) -> None:
        """Take ``gpucaas.dev/usage`` off the pod, provided its finalizers are still ``finalizers``
        (a JSON patch with a test: two replicas, or another finalizer's owner, never undo each
        other's change). Already gone, or changed since read: nothing to do here (the change's
        own event comes next)."""
        if self._kube is None:
            raise Unavailable(self._error or "Kubernetes is not configured")
        keep = [f for f in finalizers if f != crds.FINALIZER_POD_USAGE]
        ops = [
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "replace", "path": "/metadata/finalizers", "value": keep},
        ]
        try:
            self._kube.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                body=ops,
                content_type="application/json-patch+json",
                idempotent=True,  # the test makes a repeat refused, never applied twice
            )
        except (NotFound, Conflict, Invalid):  # gone, or the test failed (422): changed since read
            pass

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(self.core.read_namespaced_pod, name, namespace)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ResourceClaim (``resource.k8s.io/v1``), None when it does not exist."""
        try:
            return self._call(
                self.custom.get_namespaced_custom_object,
                "resource.k8s.io",
                "v1",
                namespace,
                "resourceclaims",
                name,
                idempotent=True,
            )
        except NotFound:
            return None

    def pod_log(self, namespace: str, name: str, *, follow: bool = False, tail_lines: int | None = None) -> Any:
        """The raw streaming response of the pod's log (iterate ``.stream()``; release when done)."""
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False, "container": "main"}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if follow:
            kwargs["_request_timeout"] = (self.timeout, 24 * 3600)
        return self._call(self.core.read_namespaced_pod_log, name, namespace, idempotent=True, **kwargs)

    def exec_upstream(self, namespace: str, pod: str, *, command: list[str], stdin: bool, tty: bool) -> Any:
        """Where and how to open the pod's ``exec`` WebSocket (:mod:`services.api.streams.exec_relay`)."""
        if self._kube is None:
            raise Unavailable(self._error or "Kubernetes is not configured")
        return exec_relay.upstream_for(
            self._kube.configuration,
            namespace=namespace,
            pod=pod,
            container="main",
            command=command,
            stdin=stdin,
            tty=tty,
        )

    def list_pod_events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        """The core/v1 Events about one pod (scheduler, kubelet, device plugin)."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        return self._json(self.core.list_namespaced_event, namespace, field_selector=selector).get("items", [])

    # -- queueing by Kueue ------------------------------------------------------------

    #: a queue position is an extra on a read: asked once, briefly, never held up by retries
    QUEUE_READ_TIMEOUT_S = 3.0

    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        """The Kueue Workloads of one namespace (one per queued pod)."""
        timeout = min(self.timeout, self.QUEUE_READ_TIMEOUT_S)
        return self._call(
            self.custom.list_namespaced_custom_object,
            kueue.GROUP,
            kueue.VERSION,
            namespace,
            "workloads",
            _request_timeout=(min(1.0, timeout), timeout),
        ).get("items", [])

    # -- tenant Secrets (values go in, only metadata is ever read back) -------------

    def create_secret(self, body: dict[str, Any], *, replace: bool = False) -> bool:
        """Create the Secret (or, with ``replace``, overwrite it); False when it already
        existed and ``replace`` was not asked for. The response (with the data) is dropped."""
        meta = body["metadata"]
        try:
            self._call(
                self.core.create_namespaced_secret, meta["namespace"], body, _preload_content=False
            ).release_conn()
            return True
        except Conflict:
            if not replace:
                return False
        self._call(
            self.core.replace_namespaced_secret, meta["name"], meta["namespace"], body, _preload_content=False
        ).release_conn()
        return True

    def list_secrets_metadata(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        """The Secrets' metadata only (the data is stripped here, before anyone sees it)."""
        items = self._json(self.core.list_namespaced_secret, namespace, label_selector=label_selector).get("items", [])
        return [{"metadata": i.get("metadata") or {}, "type": i.get("type")} for i in items]

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret's data, decoded (for the API's own Secrets, e.g. a webhook's
        signing secret); None when the Secret or the key is missing."""
        try:
            data = self._json(self.core.read_namespaced_secret, name, namespace).get("data") or {}
        except NotFound:
            return None
        value = data.get(key)
        return None if value is None else base64.b64decode(value).decode()

    def delete_secret(self, namespace: str, name: str) -> bool:
        try:
            self._call(self.core.delete_namespaced_secret, name, namespace, _preload_content=False).release_conn()
            return True
        except NotFound:
            return False

    # -- tenant volumes (PersistentVolumeClaims) ------------------------------------

    def create_pvc(self, body: dict[str, Any]) -> bool:
        """Create the claim; False when one of that name already exists."""
        try:
            self._call(
                self.core.create_namespaced_persistent_volume_claim,
                body["metadata"]["namespace"],
                body,
                _preload_content=False,
            ).release_conn()
            return True
        except Conflict:
            return False

    def list_pvcs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._json(
            self.core.list_namespaced_persistent_volume_claim, namespace, label_selector=label_selector
        ).get("items", [])

    def delete_pvc(self, namespace: str, name: str) -> bool:
        """Delete the claim; False when it did not exist."""
        try:
            self._call(
                self.core.delete_namespaced_persistent_volume_claim,
                name,
                namespace,
                _preload_content=False,
                idempotent=True,
            ).release_conn()
            return True
        except NotFound:
            return False

    # -- container endpoints (Service, Ingresses, CiliumNetworkPolicy) ---------------

    def apply_endpoint_objects(self, objects: list[dict[str, Any]]) -> int:
        """Create each object (a Service, or one served by the custom-objects API by group,
        version and plural); one that exists already counts as done. Returns how many were new."""
        made = 0
        for body in objects:
            try:
                self._endpoint_call(body, create=True)
                made += 1
            except Conflict:
                pass
        return made

    def delete_endpoint_objects(self, objects: list[dict[str, Any]]) -> int:
        """Delete each object named in ``objects`` (kind, namespace, name); returns how many existed."""
        gone = 0
        for body in objects:
            try:
                self._endpoint_call(body, create=False)
                gone += 1
            except NotFound:
                pass
        return gone

    def _endpoint_call(self, body: dict[str, Any], *, create: bool) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if body["kind"] == "Service":
            if create:
                call = self._call(
                    self.core.create_namespaced_service, ns, body, _preload_content=False, idempotent=True
                )
            else:
                call = self._call(
                    self.core.delete_namespaced_service, name, ns, _preload_content=False, idempotent=True
                )
            call.release_conn()
            return
        group, version, plural = _custom_api(body)
        if create:
            self._call(self.custom.create_namespaced_custom_object, group, version, ns, plural, body, idempotent=True)
        else:
            self._call(self.custom.delete_namespaced_custom_object, group, version, ns, plural, name, idempotent=True)

    # -- cluster inventory (admin) --------------------------------------------------

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._json(self.core.list_node).get("items", [])

    def list_cluster_objects(self, plural: str) -> list[dict[str, Any]]:
        return self._call(
            self.custom.list_cluster_custom_object, crds.GROUP, crds.VERSION, plural, idempotent=True
        ).get("items", [])

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """The ResourceSlices one DRA driver publishes (``resource.k8s.io/v1``, by the
        ``spec.driver`` field selector every API server supports for them)."""
        return self._call(
            self.custom.list_cluster_custom_object,
            "resource.k8s.io",
            "v1",
            "resourceslices",
            field_selector=f"spec.driver={driver}",
            idempotent=True,
        ).get("items", [])

    def get_cluster_object(self, plural: str, name: str) -> dict[str, Any]:
        return self._call(
            self.custom.get_cluster_custom_object, crds.GROUP, crds.VERSION, plural, name, idempotent=True
        )

    def list_warm_images(self) -> list[dict[str, Any]]:
        """Every WarmImage; none when the cluster lacks their CRD (a chart older than warm images)."""
        try:
            return self.list_cluster_objects(crds.WARMIMAGE_PLURAL)
        except NotFound:
            return []

    def create_cluster_object(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a cluster-scoped gpucaas object; 409 (Conflict) when its name is taken."""
        return self._call(self.custom.create_cluster_custom_object, crds.GROUP, crds.VERSION, plural, body)

    def delete_cluster_object(self, plural: str, name: str) -> None:
        """Delete a cluster-scoped gpucaas object; NotFound when there is none."""
        self._call(self.custom.delete_cluster_custom_object, crds.GROUP, crds.VERSION, plural, name, idempotent=True)

    def replace_cluster_object_status(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the status subresource; 409 (Conflict) when ``metadata.resourceVersion`` is stale."""
        return self._call(
            self.custom.replace_cluster_custom_object_status,
            crds.GROUP,
            crds.VERSION,
            plural,
            body["metadata"]["name"],
            body,
        )


_CUSTOM_PLURALS = {"Ingress": "ingresses", "CiliumNetworkPolicy": "ciliumnetworkpolicies"}


def _custom_api(body: dict[str, Any]) -> tuple[str, str, str]:
    group, version = body["apiVersion"].split("/", 1)
    return group, version, _CUSTOM_PLURALS[body["kind"]]


class _NotConfigured:
    """Stands in for the client APIs when there is no configuration (``_call`` refuses first)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


_UPSERT_ROUNDS = 8  # reads and conditional writes of one upsert before it gives up (Conflict)


def tenancy_in_step(current: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the Tenancy ``current`` (as read or watched) needs no write to be ``body``: its
    spec already is ``body``'s at the same revision, or it carries a later revision (which a push
    never undoes). :meth:`Kube.upsert_tenancy` answers such a resource as it is."""
    revision, held = _revision(body), _revision(current)
    if revision is not None and held is not None and held > revision:
        return True
    have, wanted = current.get("spec") or {}, body["spec"]
    same = all(have.get(k) == v for k, v in wanted.items()) and ("nfs" in wanted or "nfs" not in have)
    return same and (revision is None or held == revision)


def _revision(obj: dict[str, Any]) -> int | None:
    """The tenancy record revision a Tenancy (or its wanted body) carries; None without one."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(crds.ANNOTATION_TENANCY_REVISION)
    try:
        return int(value) if value is not None else None
    except ValueError:  # edited by hand: any revision replaces it
        return None
