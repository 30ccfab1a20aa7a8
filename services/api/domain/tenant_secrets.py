"""Pure builders and readers of the Kubernetes Secrets that hold a tenant's secrets and
registry credentials, in the tenant's own namespace.

Why the API writes these Secrets itself (not the tenancy controller, not the worker):
a value must never be stored in the API's database nor in the cluster-scoped Tenancy
resource, and those are the only channels the controller and the worker read. So the
API puts the value straight into a Secret in ``tenant-<name>`` and keeps nothing else;
listing reads the Secrets' metadata back. The API's rights on Secrets are namespaced:
the tenancy controller binds the chart's ``<release>-api-tenant-secrets`` ClusterRole
to the API's ServiceAccount in each tenant namespace only (a RoleBinding), so the API
cannot read Secrets anywhere else.

* A tenant secret ``hf`` is the Opaque Secret ``gpucaas-secret-hf`` with one key,
  ``value``; a container uses it with ``env: {"HF_TOKEN": {"secret": "hf"}}``, which
  becomes ``valueFrom.secretKeyRef`` (Kubernetes API reference, EnvVarSource).
* A registry credential is a ``kubernetes.io/dockerconfigjson`` Secret whose
  ``.dockerconfigjson`` is ``{"auths": {server: {username, password, auth}}}`` with
  ``auth = base64(username:password)`` (Kubernetes docs, "Pull an Image from a Private
  Registry"; the format of ``~/.docker/config.json``). Every tenant pod lists all of
  its tenancy's registry credentials in ``imagePullSecrets``; the kubelet picks the one
  whose server matches the image.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from core import crds

SECRET_PREFIX = "gpucaas-secret-"
REGISTRY_PREFIX = "gpucaas-registry-"
SECRET_KEY = "value"
LABEL_KIND = "gpucaas.dev/secret-kind"  # "secret" or "registry-credential"
LABEL_NAME = "gpucaas.dev/secret-name"
ANNOTATION_SERVER = "gpucaas.dev/registry-server"
ANNOTATION_USERNAME = "gpucaas.dev/registry-username"
KIND_SECRET = "secret"
KIND_REGISTRY = "registry-credential"
MANAGED_BY = "gpucaas-api"

SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SECRET_NAME_MAX = 63 - len(SECRET_PREFIX)
SECRET_NAME_RULE = f"1-{SECRET_NAME_MAX} lowercase letters, digits or '-', starting and ending with a letter or digit"
# A registry host[:port], as in an image reference's domain (distribution/reference).
REGISTRY_SERVER = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?$"
)
REGISTRY_RULE = (
    "a registry host name with an optional port, e.g. nvcr.io or registry.example.com:5000 (no scheme, no path)"
)


def check_secret_name(value: str) -> str:
    if len(value) > SECRET_NAME_MAX or not SECRET_NAME.match(value):
        raise ValueError(f"{value!r} is not a valid secret name; allowed: {SECRET_NAME_RULE}")
    return value


def check_registry_server(value: str) -> str:
    server = value.strip()
    for scheme in ("https://", "http://"):
        if server.startswith(scheme):
            server = server[len(scheme) :]
    server = server.rstrip("/")
    if len(server) > 253 or not REGISTRY_SERVER.match(server):
        raise ValueError(f"{value!r} is not a registry server; allowed: {REGISTRY_RULE}")
    return server.lower()


def secret_object_name(name: str) -> str:
    return SECRET_PREFIX + name


def registry_object_name(server: str) -> str:
    """A stable, valid object name per registry server (readable prefix + digest)."""
    slug = re.sub(r"[^a-z0-9]+", "-", server.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(server.lower().encode()).hexdigest()[:10]
    return f"{REGISTRY_PREFIX}{slug}-{digest}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _metadata(
    tenancy: str, name: str, kind: str, label_name: str | None, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    labels = {crds.LABEL_TENANCY: tenancy, crds.LABEL_MANAGED_BY: MANAGED_BY, LABEL_KIND: kind}
    if label_name is not None:
        labels[LABEL_NAME] = label_name
    meta: dict[str, Any] = {"name": name, "namespace": crds.tenant_namespace(tenancy), "labels": labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def build_secret(*, tenancy: str, name: str, value: str) -> dict[str, Any]:
    """The Opaque Secret holding tenant secret ``name``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(tenancy, secret_object_name(name), KIND_SECRET, name),
        "type": "Opaque",
        "data": {SECRET_KEY: _b64(value.encode())},
    }


def build_registry_secret(*, tenancy: str, server: str, username: str, password: str) -> dict[str, Any]:
    """The ``kubernetes.io/dockerconfigjson`` Secret for one registry server."""
    auth = _b64(f"{username}:{password}".encode())
    config = {"auths": {server: {"username": username, "password": password, "auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(
            tenancy,
            registry_object_name(server),
            KIND_REGISTRY,
            None,
            {ANNOTATION_SERVER: server, ANNOTATION_USERNAME: username},
        ),
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": _b64(json.dumps(config, separators=(",", ":")).encode())},
    }


def selector(kind: str) -> str:
    return f"{LABEL_KIND}={kind},{crds.LABEL_MANAGED_BY}={MANAGED_BY}"


def public_secret(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a listing shows of a tenant secret: its name and creation time, never the value."""
    meta = obj.get("metadata") or {}
    return {"name": (meta.get("labels") or {}).get(LABEL_NAME, ""), "created_at": meta.get("creationTimestamp")}


def public_registry(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a listing shows of a registry credential: server, username, time; never the password."""
    meta = obj.get("metadata") or {}
    notes = meta.get("annotations") or {}
    return {
        "server": notes.get(ANNOTATION_SERVER, ""),
        "username": notes.get(ANNOTATION_USERNAME, ""),
        "created_at": meta.get("creationTimestamp"),
    }
