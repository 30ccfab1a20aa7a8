"""Leader election on a ``coordination.k8s.io/v1`` Lease: one extender replica at a time answers
Kueue's partition AdmissionCheck (two, each with its own promises, could promise one partition
twice).

The rules are client-go's ``leaderelection`` ones: the holder renews ``spec.renewTime`` every
``renew_s``; another candidate takes the Lease over only once the record it observed (holder and
renew time) has not changed for ``lease_s`` of its own clock, so clocks need not agree. Writes
carry the ``resourceVersion`` read, so two candidates cannot both win a takeover. A holder that
could not renew for ``lease_s`` stops answering before anyone may take over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from core.kube import Conflict, Kube, KubeError, NotFound

log = logging.getLogger(__name__)


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Holds the Lease ``namespace/name`` as ``identity`` while :meth:`leading` says so."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_s: int = 15,
        renew_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.clock = clock
        self._renewed_at: float | None = None  # our clock, at our last successful write
        self._tried_at: float | None = None
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last read
        self._observed_at = 0.0  # our clock, when that record was first seen

    def leading(self) -> bool:
        """Whether this process holds the Lease now (tries to take or renew it when due)."""
        now = self.clock()
        if self._tried_at is None or now - self._tried_at >= self.renew_s:
            self._tried_at = now
            try:
                self._try(now)
            except KubeError as exc:
                log.warning("Lease %s/%s: %s", self.namespace, self.name, exc.summary())
        return self._renewed_at is not None and now - self._renewed_at < self.lease_s

    def _spec(self, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _micro_now()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_s,
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _try(self, now: float) -> None:
        try:
            lease = self.kube.request("GET", self.path)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, None),
            }
            try:
                self.kube.request("POST", self.collection, body=body)
            except Conflict:  # another candidate made it first
                return
            self._took(now)
            return
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        mine = holder == self.identity
        expired = not holder or now - self._observed_at >= int(spec.get("leaseDurationSeconds") or self.lease_s)
        if not mine and not expired:
            self._renewed_at = None
            return
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        lease["spec"] = self._spec(transitions, spec.get("acquireTime") if mine else None)
        try:
            self.kube.request("PUT", self.path, body=lease)  # carries the resourceVersion read
        except Conflict:  # renewed or taken meanwhile: read again at the next try
            return
        if not mine:
            self._took(now)
        else:
            self._renewed_at = now

    def _took(self, now: float) -> None:
        log.info("Lease %s/%s held by %s: answering the partition check", self.namespace, self.name, self.identity)
        self._renewed_at = now
