"""Client of the fabric service's node-local API (HTTP/1.1 + JSON over a unix socket).

The device plugin asks it to activate the NVLink partition of an allocation and
to release it; ``caasctl`` uses it for the admin operations. The server lives in
``services/fabric/server.py``; this module is the one place that knows the wire
format, so both sides agree on it.

Errors from the server are JSON ``{"code": str, "detail": str}`` and become:

- :class:`FabricUnavailable` -- the socket is absent or refuses, the request
  timed out, or the service answered 503 (Fabric Manager or its VM is down);
  worth retrying later.
- :class:`FabricConflict` -- 409: a needed partition overlaps an active partition
  of another holder (``detail`` names that holder / pod).
- :class:`FabricRejected` -- any other 4xx/5xx: bad input, unsupported partition.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

DEFAULT_SOCKET = "/run/gpucaas/fabric.sock"
SOCKET_ENV = "GPUCAAS_FABRIC_SOCKET"


def holder_for_gpus(pci_addresses: Iterable[str]) -> str:
    """The device plugin's holder key of an allocation: ``gpus:`` + sorted PCI addresses."""
    return "gpus:" + "+".join(sorted(pci_addresses))


class FabricError(Exception):
    """An error answered by (or on the way to) the fabric service."""

    def __init__(self, detail: str, *, code: str = "error", status: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.status = status

    def __str__(self) -> str:
        prefix = f"{self.status} " if self.status is not None else ""
        return f"{prefix}{self.code}: {self.detail}"


class FabricUnavailable(FabricError):
    """The fabric service, its Fabric Manager or its service VM cannot be reached now."""


class FabricConflict(FabricError):
    """A needed partition is held (active) by another holder."""


class FabricRejected(FabricError):
    """The request was refused (bad input, unknown or unsupported partition, ...)."""


def _error_for(response: httpx.Response) -> FabricError:
    try:
        body = response.json()
        code = str(body.get("code", "error"))
        detail = str(body.get("detail", response.text))
    except ValueError:
        code, detail = "error", response.text or response.reason_phrase
    status = response.status_code
    if status == 409:
        return FabricConflict(detail, code=code, status=status)
    if status in (502, 503, 504):
        return FabricUnavailable(detail, code=code, status=status)
    return FabricRejected(detail, code=code, status=status)


class FabricClient:
    """Synchronous client of the fabric service's unix-socket API.

    ``socket_path`` defaults to ``$GPUCAAS_FABRIC_SOCKET`` or ``/run/gpucaas/fabric.sock``.
    One instance may be shared between threads (httpx.Client is thread-safe).
    """

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, timeout: float = 10.0) -> None:
        self.socket_path = str(socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)
        self.timeout = timeout
        transport = httpx.HTTPTransport(uds=self.socket_path, retries=1)
        self._http = httpx.Client(transport=transport, base_url="http://fabric", timeout=timeout)

    # --- plumbing ---------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> FabricClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, *, json: Any = None,
                 params: Mapping[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except (httpx.ConnectError, httpx.TimeoutException, httpx.RemoteProtocolError,
                FileNotFoundError, ConnectionRefusedError) as exc:
            raise FabricUnavailable(
                f"fabric service at {self.socket_path} unreachable: {exc}", code="unreachable"
            ) from exc
        if response.status_code >= 400:
            raise _error_for(response)
        return response.json() if response.content else None

    # --- read -------------------------------------------------------------------------
    def topology(self) -> dict[str, Any]:
        """``{"source", "gpus": [{"physical_id", "pci_bus_id", "healthy", "reason"}]}``."""
        return self._request("GET", "/v1/topology")

    def partitions(self) -> list[dict[str, Any]]:
        """Every partition: id, gpus, nvlinks, active, supported, holder."""
        return self._request("GET", "/v1/partitions")["partitions"]

    def activations(self) -> list[dict[str, Any]]:
        """The service's records: holder, gpus, partition_ids, pod, since."""
        return self._request("GET", "/v1/activations")["activations"]

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health")

    # --- allocations ------------------------------------------------------------------
    def activate(self, holder: str, gpus: Iterable[str]) -> dict[str, Any]:
        """Activate the partition(s) for these GPUs (PCI addresses) on behalf of ``holder``.

        Idempotent for the same holder and GPU set. Raises FabricConflict when a needed
        partition overlaps an active partition of another holder.
        """
        return self._request("POST", "/v1/activations", json={"holder": holder, "gpus": list(gpus)})

    def release(self, holder: str) -> dict[str, Any]:
        """Deactivate what ``holder`` holds (idempotent: an unknown holder is fine)."""
        from urllib.parse import quote

        return self._request("DELETE", f"/v1/activations/{quote(holder, safe='')}")

    def sync(self, live: Iterable[Mapping[str, Any] | str], grace_seconds: float | None = 30.0) -> dict[str, Any]:
        """Tell the service which holders are alive; it releases the others older than grace.

        ``live`` items are ``{"holder": str, "pod": "ns/name" | None}`` or plain holder strings.
        ``grace_seconds=None`` leaves the grace to the service (GPUCAAS_FABRIC_RELEASE_GRACE_S).
        Returns ``{"released": [...], "pending": [...], "kept": [...]}``.
        """
        items = [{"holder": x, "pod": None} if isinstance(x, str) else dict(x) for x in live]
        body: dict[str, Any] = {"live": items}
        if grace_seconds is not None:
            body["grace_seconds"] = grace_seconds
        return self._request("POST", "/v1/activations/sync", json=body)

    # --- admin (caasctl) --------------------------------------------------------------
    def activate_partition(self, partition_id: int, force: bool = False) -> dict[str, Any]:
        return self._request("POST", f"/v1/partitions/{int(partition_id)}/activate",
                             params={"force": str(bool(force)).lower()})

    def deactivate_partition(self, partition_id: int, force: bool = False) -> dict[str, Any]:
        return self._request("POST", f"/v1/partitions/{int(partition_id)}/deactivate",
                             params={"force": str(bool(force)).lower()})
