"""Generated requests from the OpenAPI schema (Schemathesis, every check): no server
error and no response outside the schema, as a tenant and as an admin, on both
databases.

The API runs as in production (uvicorn, TLS) against the local cluster's kube-apiserver,
so the Kubernetes-backed admin endpoints answer too; no controller runs, so
tenancies never become Ready and submissions stay Queued. Rate limits are raised
for the run (thousands of requests in a minute); tests/api/test_limits.py checks them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import new_tenancy
from tests.api.harness import ADMIN_TOKEN, ApiServer

# Cases per operation and phase; with the API's ~20 operations this gives well over
# 2,000 generated cases per token kind.
MAX_EXAMPLES = 80
MIN_CASES = 2000
CONFIG = Path(__file__).with_name("schemathesis.toml")


def _schemathesis() -> str:
    exe = Path(sys.executable).with_name("schemathesis")
    found = str(exe) if exe.exists() else shutil.which("schemathesis")
    assert found, "schemathesis is not installed (pip install -e .[dev])"
    return found


def _start(server: ApiServer, token: str, ca_file: Path, out: Path) -> subprocess.Popen[bytes]:
    cmd = [
        _schemathesis(),
        "--config-file",
        str(CONFIG),
        "run",
        f"{server.base_url}/openapi.json",
        "--checks",
        "all",
        # DELETE /v1/containers/{id} cancels: the record and its /events stay as history
        # (as a cancelled job does on every batch service), which this heuristic takes
        # for a use after free; schemathesis.toml says why, every other check runs.
        "--exclude-checks",
        "use_after_free",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--header",
        f"Authorization: Bearer {token}",
        "--tls-verify",
        str(ca_file),
        "--seed",
        "16",
        "--workers",
        "1",  # hypothesis' lambda descriptions are not thread-safe on Python 3.11
        "--no-color",
    ]
    with out.open("wb") as sink:
        # run in the test's folder: Schemathesis keeps a cache in its working directory
        return subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=out.parent)


def _cases(output: str) -> int:
    """Generated test cases from Schemathesis' summary line ("Test cases: N generated, ...")."""
    match = re.search(r"Test cases:\s*([\d,]+)\s+generated", output)
    assert match, output[-3000:]
    return int(match.group(1).replace(",", ""))


@pytest.mark.timeout(1800)  # thousands of requests; on a busy machine this takes minutes
def test_generated_requests_never_break_the_api(
    serve: Callable[..., ApiServer], database_url: str, kubeconfig: Path, tls_ca: Any, tmp_path: Path
) -> None:
    server = serve(
        database_url,
        kubeconfig,
        rate_limit_token="100000/minute",
        rate_limit_tenancy="100000/minute",
        rate_limit_bad_tokens="100000/minute",
        # the worker runs as in production; thousands of never-Ready submissions are
        # retried at the production pace, not the fast one other tests use
        worker_poll_seconds=1.0,
        retry_max_seconds=30.0,
    )
    with server.client() as admin:
        tenant = new_tenancy(admin, "fuzzed", gpu_quota=100000, pod_quota=100000)
    ca_file = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(ca_file)
    # Both token kinds at once, against the same server (as tenants and admins share it).
    runs = {kind: (tmp_path / f"{kind}.log") for kind in ("admin", "tenant")}
    procs = {
        kind: _start(server, token, ca_file, runs[kind]) for kind, token in (("admin", ADMIN_TOKEN), ("tenant", tenant))
    }
    for proc in procs.values():
        proc.wait(timeout=1200)
    for kind, proc in procs.items():
        output = runs[kind].read_text(errors="replace")
        summary = output[output.rfind("SUMMARY") - 200 :] if "SUMMARY" in output else output[-4000:]
        assert proc.returncode == 0, f"{kind}: {_failures(output)}\n{summary[-4000:]}"
        assert _cases(output) >= MIN_CASES, f"{kind}: {summary[-3000:]}"


def _failures(output: str) -> str:
    """The failure headlines and their reproduction commands, without huge bodies."""
    keep = [
        line[:400]
        for line in output.splitlines()
        if line.startswith(("___", "- ST", "    curl", "    `{", "[")) or "Error" in line
    ]
    return "\n".join(keep[:120])
