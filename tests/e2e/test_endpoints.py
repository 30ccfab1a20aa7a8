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

from devtools import waiting
from devtools.sandbox import runner

from .conftest import TIMEOUT, Tenant, new_tenant

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation

PAGE = "served from a gpucaas container"
#: one httpd in the background on 8080 (private), one in the foreground on 9090 (public)
SERVE = (
    f"mkdir -p /tmp/www && echo '{PAGE}' > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && "
    "exec httpd -f -p 9090 -h /tmp/www"
)


@pytest.fixture(scope="package")
def outsider(admin: Tenant) -> Tenant:
    return new_tenant(admin, "outsider", 2)


def ingress_info(sandbox: runner.Sandbox) -> dict[str, Any]:
    return json.loads((sandbox.state_dir / "ingress.json").read_text())


def fetch(sandbox: runner.Sandbox, url: str, token: str | None = None) -> tuple[int, str]:
    """GET ``url`` at the ingress controller's address (curl: SNI and Host from the URL)."""
    info = ingress_info(sandbox)
    host = urlsplit(url).hostname
    args = [
        "curl",
        "-sS",
        "--max-time",
        "20",
        "--cacert",
        str(sandbox.tls.ca_cert),
        "--connect-to",
        f"{host}:443:{info['address']}",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        url,
    ]
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
    ran = tenant.caasctl(
        "run", "busybox:1.36", "--detach", "--port", "8080", "--port", "9090:public", "--", "sh", "-c", SERVE
    )
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
    waiting.wait_for(
        lambda: fetch(sandbox, urls[8080] + "/", tenant.token)[0] == 404,
        TIMEOUT,
        interval=0.5,
        what="the private endpoint gone",
    )
    waiting.wait_for(
        lambda: fetch(sandbox, urls[9090] + "/")[0] == 404, TIMEOUT, interval=0.5, what="the public endpoint gone"
    )
    status, container = tenant.call("GET", f"/v1/containers/{cid}")
    assert container["endpoints"] == []


#: a CGI script that sends one line, then the next only once /tmp/go exists (the test makes it with exec)
STREAM_CGI = """#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
echo first
while [ ! -e /tmp/go ]; do sleep 0.1; done
echo second
"""
#: a CGI script that shows the request headers the container got
HEADERS_CGI = """#!/bin/sh
printf 'Content-Type: text/plain\\r\\n\\r\\n'
env | grep '^HTTP_' | sort
"""
#: a WebSocket server in busybox sh (run by nc for each connection): the handshake, then one text frame
WS_SERVER = r"""#!/bin/sh
key=""
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  case "$line" in [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf '%s' "${line#*:}" | tr -d ' ');; esac
done
digest=$(printf '%s' "${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11" | sha1sum | cut -d' ' -f1)
accept=$(printf "$(printf '%s' "$digest" | sed 's/../\\x&/g')" | base64)
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
printf 'Sec-WebSocket-Accept: %s\r\n\r\n' "$accept"
printf '\201\017hello-websocket'
sleep 30
"""
SERVE_BOTH = (
    'mkdir -p /tmp/www/cgi-bin && echo ok > /tmp/www/ok && printf "%s" "$STREAM_CGI" > /tmp/www/cgi-bin/stream && '
    'printf "%s" "$HEADERS_CGI" > /tmp/www/cgi-bin/headers && '
    'printf "%s" "$WS_SERVER" > /tmp/ws.sh && chmod +x /tmp/www/cgi-bin/* /tmp/ws.sh && '
    "(nc -ll -p 8081 -e /tmp/ws.sh &) && exec httpd -f -p 8080 -h /tmp/www"
)


def test_streamed_responses_and_websockets_pass_through(sandbox: runner.Sandbox, tenant: Tenant) -> None:
    import asyncio
    import socket
    import ssl
    import threading

    from websockets.asyncio.client import connect

    status, body = tenant.call(
        "POST",
        "/v1/containers",
        {
            "image": "busybox:1.36",
            "command": ["sh", "-c", SERVE_BOTH],
            "env": {"STREAM_CGI": STREAM_CGI, "HEADERS_CGI": HEADERS_CGI, "WS_SERVER": WS_SERVER},
            "ports": [{"port": 8080}, {"port": 8081}],
        },
    )
    assert status == 202, body
    cid = body["id"]
    tenant.wait(cid, "Running")
    urls = {e["port"]: e["url"] for e in body["endpoints"]}
    info = ingress_info(sandbox)

    # a streamed response: the first line arrives while the script still waits for /tmp/go
    waiting.wait_for(
        lambda: fetch(sandbox, urls[8080] + "/ok", tenant.token)[0] == 200,
        TIMEOUT,
        interval=0.5,
        what="the route to the container",
    )
    # the tenant's token stops at the ingress controller: the container never sees it
    code, headers = fetch(sandbox, urls[8080] + "/cgi-bin/headers", tenant.token)
    assert code == 200 and "HTTP_HOST=" in headers, headers
    assert "HTTP_AUTHORIZATION" not in headers and tenant.token not in headers, headers
    host = urlsplit(urls[8080]).hostname
    curl = subprocess.Popen(
        [
            "curl",
            "-sS",
            "-N",
            "--max-time",
            "120",
            "--cacert",
            str(sandbox.tls.ca_cert),
            "--connect-to",
            f"{host}:443:{info['address']}",
            "-H",
            f"Authorization: Bearer {tenant.token}",
            urls[8080] + "/cgi-bin/stream",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert curl.stdout is not None
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(curl.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        waiting.wait_for(lambda: bool(first), TIMEOUT, interval=0.2, what="the first streamed line")
        assert first == ["first\n"]
        assert curl.poll() is None  # still streaming: the script has not been told to go on
        went = tenant.caasctl("exec", cid, "--", "touch", "/tmp/go")
        assert went.returncode == 0, went.stderr
        rest, errors = curl.communicate(timeout=120)
        assert rest == "second\n", errors
    finally:
        if curl.poll() is None:
            curl.kill()

    # a WebSocket: Traefik passes the upgrade (after asking the API) and the frames
    ws_host = urlsplit(urls[8081]).hostname
    ctx = ssl.create_default_context(cafile=str(sandbox.tls.ca_cert))
    address, port = info["address"].rsplit(":", 1)

    async def first_message() -> str:
        sock = socket.create_connection((address, int(port)), timeout=30)
        sock.setblocking(False)
        try:
            async with connect(
                f"wss://{ws_host}/",
                sock=sock,
                ssl=ctx,
                server_hostname=ws_host,
                open_timeout=30,
                additional_headers={"Authorization": f"Bearer {tenant.token}"},
            ) as ws:
                return str(await asyncio.wait_for(ws.recv(), 30))
        finally:
            sock.close()

    def message() -> str | None:
        # websockets' asyncio client: its sync one uses one TLS session from two threads
        try:
            return asyncio.run(first_message())
        except Exception:  # noqa: BLE001 - the route may not be there yet: try again
            return None

    assert waiting.wait_for(message, TIMEOUT, interval=0.5, what="a WebSocket message") == "hello-websocket"
    assert tenant.caasctl("cancel", cid).returncode == 0
