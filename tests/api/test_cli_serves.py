"""``gpucaas api`` as a process: HTTPS from the given pair, the generated admin token printed
once on stderr, and the same database reused on the next start without a new token."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from devtools.ports import free_port
from devtools.waiting import wait_for
from tests.api.harness import write_dead_kubeconfig


def _run_until_healthy(args: list[str], env: dict[str, str], url: str, verify: Any) -> subprocess.Popen[str]:
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def healthy() -> bool:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            return httpx.get(f"{url}/healthz", verify=verify, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 90, interval=0.2, what="gpucaas api to answer /healthz")
    except AssertionError:
        proc.kill()
        raise
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _out, err = proc.communicate(timeout=60)
    return err


def test_gpucaas_api_serves_https_and_prints_the_admin_token_once(
    tmp_path: Path, tls_pair: tuple[Path, Path], tls_ca: Any
) -> None:
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    verify = ssl.create_default_context()
    tls_ca.configure_trust(verify)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env.update(
        {
            "GPUCAAS_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}",
            "GPUCAAS_KUBECONFIG": str(write_dead_kubeconfig(tmp_path / "kubeconfig")),
            "GPUCAAS_TLS_CERT": str(tls_pair[0]),
            "GPUCAAS_TLS_KEY": str(tls_pair[1]),
            "GPUCAAS_LOG_LEVEL": "WARNING",
        }
    )
    args = [sys.executable, "-m", "gpucaas", "api", "--host", "127.0.0.1", "--port", str(port)]

    proc = _run_until_healthy(args, env, url, verify)
    err_first = _stop(proc)
    match = re.search(r"generated admin token \(shown once\): (gpc_\S+)", err_first)
    assert match, err_first
    token = match.group(1)

    proc = _run_until_healthy(args, env, url, verify)
    r: httpx.Response | None = None
    try:
        r = httpx.post(
            f"{url}/v1/containers",
            verify=verify,
            headers={"Authorization": f"Bearer {token}"},
            json={"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"},
        )
    finally:
        err_second = _stop(proc)
    assert r is not None and r.status_code == 202, r.text if r is not None else None
    assert "generated admin token" not in err_second  # shown once only
