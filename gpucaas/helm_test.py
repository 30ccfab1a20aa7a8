"""The chart's ``helm test`` checks, run in the product's image by the chart's test pods
(``python -m gpucaas.helm_test api|controller ...``, templates/tests/):

- ``api URL [CA]``: the API answers ``URL`` (its ``/readyz``: the database and Kubernetes
  reachable) with 200, over HTTPS verified with ``CA`` when given;
- ``controller NAMESPACE DEPLOYMENT``: the controller's Deployment has every replica of its
  current generation Ready, read with the pod's ServiceAccount token.

A test run right after an install or upgrade may meet pods still starting, so each check
retries until its deadline, then exits 1 with the last answer. Only the standard library: the
check must not depend on what it checks.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class CheckFailed(Exception):
    """The check's condition did not hold by its deadline."""


def _until(check: Callable[[], str], timeout_s: float, poll_s: float) -> str:
    """``check()``'s message once it returns; it raises CheckFailed (or a connection error) while
    the condition does not hold, and the last of those is raised after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except (CheckFailed, OSError) as exc:
            if time.monotonic() >= deadline:
                raise CheckFailed(str(exc)) from None
        time.sleep(poll_s)


def _get(url: str, context: ssl.SSLContext | None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode(errors="replace")


def _context(ca_file: str | None) -> ssl.SSLContext:
    """Verified TLS: against ``ca_file`` when it exists, else the system's CAs."""
    return ssl.create_default_context(cafile=ca_file if ca_file and os.path.exists(ca_file) else None)


def api_ready(url: str, ca_file: str | None = None, *, timeout_s: float = 60, poll_s: float = 2) -> str:
    context = _context(ca_file) if url.startswith("https:") else None

    def check() -> str:
        status, body = _get(url, context)
        if status != 200:
            raise CheckFailed(f"{url} answered {status}: {body}")
        return f"{url} answered 200: {body}"

    return _until(check, timeout_s, poll_s)


def controller_ready(
    namespace: str,
    deployment: str,
    *,
    server: str | None = None,
    service_account: Path = SERVICE_ACCOUNT,
    timeout_s: float = 120,
    poll_s: float = 2,
) -> str:
    if server is None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        server = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
    url = f"{server}/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}"
    context = _context(str(service_account / "ca.crt")) if server.startswith("https:") else None

    def check() -> str:
        token = (service_account / "token").read_text().strip()
        status, body = _get(url, context, {"Authorization": f"Bearer {token}"})
        if status != 200:
            raise CheckFailed(f"reading deployment {namespace}/{deployment}: {status} {body}")
        wanted = (body.get("spec") or {}).get("replicas", 1)
        st = body.get("status") or {}
        current = st.get("observedGeneration", 0) >= body["metadata"].get("generation", 0)
        ready, updated = st.get("readyReplicas", 0), st.get("updatedReplicas", 0)
        if not (current and ready >= wanted and updated >= wanted):
            raise CheckFailed(
                f"deployment {namespace}/{deployment}: {ready} of {wanted} replicas Ready, {updated} updated"
                + ("" if current else " (its controller has not seen the newest spec)")
            )
        return f"deployment {namespace}/{deployment}: {ready} of {wanted} replicas Ready"

    return _until(check, timeout_s, poll_s)


USAGE = "usage: python -m gpucaas.helm_test api URL [CA] | controller NAMESPACE DEPLOYMENT"


def main(argv: list[str]) -> int:
    try:
        if len(argv) in (2, 3) and argv[0] == "api":
            print(api_ready(argv[1], argv[2] if len(argv) == 3 else None))
        elif len(argv) == 3 and argv[0] == "controller":
            print(controller_ready(argv[1], argv[2]))
        else:
            print(USAGE, file=sys.stderr)
            return 2
    except CheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
