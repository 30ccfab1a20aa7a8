"""Generated requests from the OpenAPI schema (Schemathesis, every check): no server
error and no response outside the schema, as a tenant and as an admin, on both
databases.

The API runs as in production (uvicorn, TLS) against the Kubernetes API emulator,
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
MAX_EXAMPLES = 60
MIN_CASES = 2000
CONFIG = Path(__file__).with_name("schemathesis.toml")


def _schemathesis() -> str:
    exe = Path(sys.executable).with_name("schemathesis")
    found = str(exe) if exe.exists() else shutil.which("schemathesis")
    assert found, "schemathesis is not installed (pip install -e .[dev])"
    return found


def _run(server: ApiServer, token: str, ca_file: Path, report: Path) -> tuple[int, str]:
    cmd = [
        _schemathesis(), "--config-file", str(CONFIG), "run", f"{server.base_url}/openapi.json",
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--header", f"Authorization: Bearer {token}",
        "--tls-verify", str(ca_file),
        "--seed", "16",
        "--workers", "2",
        "--no-color",
        "--report", "junit", "--report-dir", str(report),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)  # noqa: S603
    return proc.returncode, proc.stdout + proc.stderr


def _cases(output: str) -> int:
    """Generated test cases from Schemathesis' summary line ("Test cases: N generated, ...")."""
    match = re.search(r"Test cases:\s*([\d,]+)\s+generated", output)
    assert match, output[-3000:]
    return int(match.group(1).replace(",", ""))


@pytest.mark.parametrize("kind", ["admin", "tenant"])
def test_generated_requests_never_break_the_api(
    kind: str, serve: Callable[..., ApiServer], database_url: str, kubeconfig: Path, tls_ca: Any, tmp_path: Path
) -> None:
    server = serve(
        database_url, kubeconfig,
        rate_limit_token="100000/minute", rate_limit_tenancy="100000/minute", rate_limit_bad_tokens="100000/minute",
    )
    token = ADMIN_TOKEN
    if kind == "tenant":
        with server.client() as admin:
            token = new_tenancy(admin, "fuzzed", gpu_quota=100000, pod_quota=100000)
    ca_file = tmp_path / "ca.pem"
    tls_ca.cert_pem.write_to_path(ca_file)
    code, output = _run(server, token, ca_file, tmp_path / "report")
    assert code == 0, output[-8000:]
    assert _cases(output) >= MIN_CASES, output[-3000:]
