"""Tenancies for a benchmark's tenants: made through the admin API, each with a token, then
waited for until the tenancy controller reports them Ready (their namespace, quota and
policies made), so that a first submission does not time the controller too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.kit.gpucaas_api import GpucaasApi

READY_WITHIN_S = 180.0


def open_tenancies(
    api: GpucaasApi, admin_token: str, names: list[str], *, gpu_quota: int, pod_quota: int
) -> dict[str, str]:
    """Each tenancy of ``names`` (one that exists already is kept) and a new token of it: name -> token."""
    tokens = {}
    for name in names:
        body = {"name": name, "gpu_quota": gpu_quota, "pod_quota": pod_quota}
        api.expect("POST", "/v1/admin/tenancies", admin_token, body, ok=(201, 409))
        tokens[name] = api.expect("POST", f"/v1/admin/tenancies/{name}/tokens", admin_token, {}, ok=(201,))["token"]
    return tokens


def wait_ready(kubeconfig: Path, names: list[str], timeout: float = READY_WITHIN_S) -> None:
    """Until every Tenancy custom resource of ``names`` reports ``phase: Ready``."""
    from core.crds import GROUP, TENANCY_PLURAL, VERSION
    from core.kube import KubeConnection, connect
    from devtools.waiting import wait_for

    wanted = set(names)
    with connect(KubeConnection(kubeconfig=kubeconfig)) as kube:

        def ready() -> bool:
            items: list[dict[str, Any]] = kube.request("GET", f"/apis/{GROUP}/{VERSION}/{TENANCY_PLURAL}")["items"]
            return wanted <= {o["metadata"]["name"] for o in items if (o.get("status") or {}).get("phase") == "Ready"}

        wait_for(ready, timeout, interval=0.5, what=f"tenancies Ready ({len(names)})")
