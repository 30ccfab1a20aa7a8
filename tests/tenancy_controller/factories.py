"""Data builders for the tenancy controller's tests."""

from __future__ import annotations

import uuid
from typing import Any

from core import crds


def tenancy_body(
    name: str = "acme",
    *,
    gpu_quota: int | None = 8,
    pod_quota: int | None = 50,
    allow_internet: bool | None = False,
    nfs: dict[str, Any] | None = None,
    uid: str | None = None,
    generation: int | None = 1,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Tenancy as the API server would hand it out (uid, generation) or, with uid='', as posted."""
    spec: dict[str, Any] = {}
    if gpu_quota is not None:
        spec["gpuQuota"] = gpu_quota
    if pod_quota is not None:
        spec["podQuota"] = pod_quota
    if allow_internet is not None:
        spec["network"] = {"allowInternet": allow_internet}
    if nfs is not None:
        spec["nfs"] = nfs
    meta: dict[str, Any] = {"name": name}
    if uid != "":
        meta["uid"] = uid or str(uuid.uuid4())
    if generation is not None:
        meta["generation"] = generation
    body: dict[str, Any] = {"apiVersion": crds.API_VERSION, "kind": "Tenancy", "metadata": meta, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def new_tenancy(name: str, **spec: Any) -> dict[str, Any]:
    """A Tenancy to POST (no uid, generation or status)."""
    return tenancy_body(name, uid="", generation=None, **spec)
