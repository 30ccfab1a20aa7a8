"""The web console on the sandbox with real nodes, in a real browser (Playwright driving Debian's
Chromium headless): sign in with the tenant's token, submit a 2-GPU container that serves HTTP
on a public port, see it reach Running and its log line arrive, open its endpoint (the page
its busybox httpd serves, through the sandbox's Traefik), cancel it and see the endpoint gone.

The browser reaches nothing but this machine: the endpoint domain is mapped to the ingress
controller's address (no DNS here), every other name fails, and a dead proxy takes the rest.
The pages' own requests all go to 127.0.0.1. The console's other pages and its token
management are tested against the API alone: ``tests/api/test_console.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from devtools import waiting
from devtools.sandbox import runner
from tests.console_browser import goto, reload

from .conftest import TIMEOUT, Tenant

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation

PAGE = "served-by-a-gpucaas-container"
COMMAND = (
    f'sh -c "mkdir -p /tmp/www && echo {PAGE} > /tmp/www/index.html && echo serving on 8080 && '
    'exec httpd -f -p 8080 -h /tmp/www"'
)


@pytest.fixture
def browser(sandbox: runner.Sandbox) -> Iterator[Any]:
    from playwright import sync_api

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is needed (make install installs it)")
    ingress = json.loads((sandbox.state_dir / "ingress.json").read_text())
    domain = ingress["domain"]
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--host-resolver-rules=MAP *.{domain} {ingress['address']}, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--proxy-server=http://127.0.0.1:9",
        f"--proxy-bypass-list=127.0.0.1;*.{domain}",
    ]
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=args, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_a_tenant_runs_a_server_opens_its_endpoint_and_cancels_it_in_the_console(
    sandbox: runner.Sandbox, tenant: Tenant, browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    # the sandbox's CA is not the browser's: this context accepts the API's and the endpoint's
    # certificates (curl checks them against tls/ca.pem in test_endpoints.py)
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(120_000)
    requests: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    page = context.new_page()
    goto(page, f"{sandbox.api_url}/console/")
    page.fill("#token", tenant.token)
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#containers")

    page.click("text=New container")
    page.fill("#image", "busybox:1.36")
    page.select_option("#gpus", "2")
    page.fill("#command", COMMAND)
    page.fill("#ports", "8080:public")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"#/containers/[0-9a-f]+$"))
    cid = page.url.rsplit("/", 1)[1]
    page.wait_for_selector("#container-status >> text=Running")
    expect(page.locator("#log")).to_contain_text("serving on 8080")
    status, container = tenant.call("GET", f"/v1/containers/{cid}")
    assert status == 200 and container["gpus"] == 2
    assert container["command"] == ["sh", "-c", COMMAND.split('"')[1]]
    link = page.locator("#endpoints a.endpoint")
    url = link.get_attribute("href")
    assert url == container["endpoints"][0]["url"] and urlsplit(url).hostname.startswith(f"{cid}-8080.")
    page.screenshot(path=tmp_path / "container-on-sandbox.png", full_page=True)

    # open it: a new tab, the page the container serves (the controller may need a moment
    # to learn the route: reload until it answers)
    with context.expect_page() as opened:
        link.click()
    served = opened.value

    def shows_the_page() -> bool:
        served.wait_for_load_state()
        if PAGE in (served.text_content("body") or ""):
            return True
        reload(served)
        return False

    waiting.wait_for(shows_the_page, TIMEOUT, interval=0.5, what="the endpoint's page in the browser")
    served.close()

    page.click("#cancel")
    page.click("#cancel")
    page.wait_for_selector("#container-status >> text=Cancelled")
    page.wait_for_selector("#endpoints >> text=None: the container has ended.")
    context.close()
    pages = [u for u in requests if urlsplit(u).hostname not in (None, "127.0.0.1")]
    assert {urlsplit(u).hostname for u in pages} <= {urlsplit(url).hostname}, pages
