"""Container endpoints on real nodes, through the sandbox's real ingress controller (Traefik).

A busybox ``httpd`` on a declared port answers at ``https://<id>-<port>.<endpoint domain>``,
asked the way a tenant's client would: curl to the address ``ingress.json`` gives, with
SNI and Host from the URL, trusting the sandbox CA. A private port answers only a token of
the container's tenancy (401 without one, 404 with another tenancy's, as for an endpoint
that does not exist); a public one answers anyone; after cancel neither answers.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest

from gpucaas.devtools import waiting
from gpucaas.programs.sandbox import runner

from .conftest import TIMEOUT, Tenant, new_tenant

PAGE = "served from a gpucaas container"
#: one httpd in the background on 8080 (private), one in the foreground on 9090 (public)
SERVE = ("mkdir -p /tmp/www && echo '%s' > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && "
         "exec httpd -f -p 9090 -h /tmp/www" % PAGE)


@pytest.fixture(scope="package")
def outsider(admin: Tenant) -> Tenant:
    return new_tenant(admin, "outsider", 2)


def ingress_info(sandbox: runner.Sandbox) -> dict[str, Any]:
    return json.loads((sandbox.state_dir / "ingress.json").read_text())


def fetch(sandbox: runner.Sandbox, url: str, token: str | None = None) -> tuple[int, str]:
    """GET ``url`` at the ingress controller's address (curl: SNI and Host from the URL)."""
    info = ingress_info(sandbox)
    host = urlsplit(url).hostname
    args = ["curl", "-sS", "--max-time", "20", "--cacert", str(sandbox.tls.ca_cert),
            "--connect-to", f"{host}:443:{info['address']}", "-o", "-", "-w", "\n%{http_code}", url]
    if token:
        args += ["-H", f"Authorization: Bearer {token}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body


def test_ingress_json_names_the_controllers_https_address(sandbox: runner.Sandbox) -> None:
    info = ingress_info(sandbox)
    assert info["address"].startswith("127.0.0.1:") and info["domain"] == "endpoints.gpucaas.test"
    # nothing declared there: the controller's own 404, over TLS with the sandbox CA's wildcard
    assert fetch(sandbox, f"https://{'0' * 20}-8080.{info['domain']}/")[0] == 404


def test_a_private_endpoint_answers_its_tenancy_only_and_a_public_one_anyone(
    sandbox: runner.Sandbox, tenant: Tenant, outsider: Tenant
) -> None:
    ran = tenant.caasctl("run", "busybox:1.36", "--detach", "--port", "8080", "--port", "9090:public",
                         "--", "sh", "-c", SERVE)
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    cid = ran.stdout.strip()
    tenant.wait(cid, "Running")
    status, container = tenant.call("GET", f"/v1/containers/{cid}")
    assert status == 200
    urls = {e["port"]: e["url"] for e in container["endpoints"]}
    domain = ingress_info(sandbox)["domain"]
    assert urls == {8080: f"https://{cid}-8080.{domain}", 9090: f"https://{cid}-9090.{domain}"}
    listed = tenant.caasctl("ps", "-o", "json")
    assert listed.returncode == 0 and urls[8080] in listed.stdout and urls[9090] in listed.stdout

    # the controller learns the Ingress and the pod's address in a moment: wait for the page
    def served() -> tuple[int, str] | None:
        answer = fetch(sandbox, urls[8080] + "/", tenant.token)
        return answer if answer[0] == 200 else None
    code, body = waiting.wait_for(served, TIMEOUT, interval=0.5, what="the private endpoint served")
    assert body.strip() == PAGE

    assert fetch(sandbox, urls[8080] + "/")[0] == 401
    assert fetch(sandbox, urls[8080] + "/", "gca_made-up-token")[0] == 401
    theirs = fetch(sandbox, urls[8080] + "/", outsider.token)
    absent = fetch(sandbox, f"https://{'0' * 20}-8080.{domain}/", outsider.token)
    assert theirs[0] == 404, theirs
    assert absent[0] == 404, absent

    def public() -> tuple[int, str] | None:
        answer = fetch(sandbox, urls[9090] + "/")
        return answer if answer[0] == 200 else None
    assert waiting.wait_for(public, TIMEOUT, interval=0.5, what="the public endpoint served")[1].strip() == PAGE
    assert fetch(sandbox, urls[9090] + "/", outsider.token)[0] == 200

    cancelled = tenant.caasctl("cancel", cid)
    assert cancelled.returncode == 0, cancelled.stderr
    waiting.wait_for(lambda: fetch(sandbox, urls[8080] + "/", tenant.token)[0] == 404, TIMEOUT, interval=0.5,
                     what="the private endpoint gone")
    waiting.wait_for(lambda: fetch(sandbox, urls[9090] + "/")[0] == 404, TIMEOUT, interval=0.5,
                     what="the public endpoint gone")
    status, container = tenant.call("GET", f"/v1/containers/{cid}")
    assert container["endpoints"] == []
