"""Where a webhook's signing secret lives: a Kubernetes Secret in the tenant namespace.

The dispatcher must read the secret back to sign, so it cannot be kept as a digest
like API tokens are. It is kept the way the tenant's own secrets are
(``services/api/domain/tenant_secrets.py``): never in the API's database, but in an Opaque
Secret ``gpucaas-webhook-<id>`` in ``tenant-<name>`` (Kubernetes encrypts Secrets at
rest when the cluster's EncryptionConfiguration says so), written and read with the
API's namespaced rights there. It is labelled with its own kind, so tenant secret
listings do not show it, and it goes with the namespace when the tenancy is deleted.
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from core import crds
from services.api.domain.tenant_secrets import LABEL_KIND, MANAGED_BY
from services.api.kube import Kube

KIND_WEBHOOK = "webhook-signing-secret"
PREFIX = "gpucaas-webhook-"
KEY = "secret"


def object_name(webhook_id: str) -> str:
    return PREFIX + webhook_id.replace("_", "-")


def build(*, tenancy: str, webhook_id: str, secret: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": object_name(webhook_id),
            "namespace": crds.tenant_namespace(tenancy),
            "labels": {crds.LABEL_TENANCY: tenancy, crds.LABEL_MANAGED_BY: MANAGED_BY, LABEL_KIND: KIND_WEBHOOK},
        },
        "type": "Opaque",
        "data": {KEY: base64.b64encode(secret.encode()).decode()},
    }


class SecretCache:
    """Signing secrets read from Kubernetes, kept in memory (they never change for an id)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}

    def get(self, *, tenancy: str, webhook_id: str) -> str | None:
        with self._lock:
            if webhook_id in self._known:
                return self._known[webhook_id]
        value = self.kube.read_secret_key(crds.tenant_namespace(tenancy), object_name(webhook_id), KEY)
        if value is not None:
            with self._lock:
                self._known[webhook_id] = value
        return value

    def forget(self, webhook_id: str) -> None:
        with self._lock:
            self._known.pop(webhook_id, None)
