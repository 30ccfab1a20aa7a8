"""The web console (``/console``, services/api/console): served by the API with its Content
Security Policy and no inline script or style, and used in a real browser — Playwright
driving Debian's Chromium headless, with every host but 127.0.0.1 unreachable — against
the API on the local cluster, the tests playing the scheduler and the kubelet: sign in,
submit a 2-GPU container, see it reach Running and its log lines arrive, cancel it, mint
a ``read`` token (whose console offers no submission and no tokens) and revoke it. Every
request the pages make goes to 127.0.0.1. Screenshots of the main pages are kept under the
test's tmp folder (``console-shots``); with ``GPUCAAS_UPDATE_DOCS_IMAGES=1`` the containers list
is copied to docs/img/console.png.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from devtools.waiting import wait_for
from services.api.console import CSP, STATIC
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import get_pod, mark_tenancy_ready, set_pod_status
from tests.console_browser import NETWORK_CHANGED, goto, reload

DOCS_SHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "console.png"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # nothing but the API: other names do not resolve, and a dead proxy takes the rest
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1",
]


def test_the_console_is_served_with_its_csp_and_holds_no_inline_code(module_api: ApiServer) -> None:
    assert "unsafe-inline" not in CSP and "frame-ancestors 'none'" in CSP
    with module_api.client(None) as anon:
        root = anon.get("/console")
        assert root.status_code == 308 and root.headers["location"] == "/console/"
        for path in (
            "/console/",
            "/console/console.css",
            "/console/js/app.js",
            "/console/js/pages.js",
            "/console/missing.js",
        ):
            r = anon.get(path)
            assert r.status_code == (404 if "missing" in path else 200), path
            assert r.headers["content-security-policy"] == CSP, path
            assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
        page = anon.get("/console/").text
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts and all("src=" in s for s in scripts), "inline script"
    assert "<style" not in page and " style=" not in page
    assert not re.search(r"<[^>]+\son[a-z]+=", page), "inline event handler"
    for path in STATIC.rglob("*"):
        if path.is_file():
            text = path.read_text()
            # no third-party origin anywhere (the SVG namespace is a name, not a request)
            assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), path
            # API data goes in as text nodes; the token lives in sessionStorage only
            assert ".innerHTML" not in text and "localStorage." not in text, path


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("the playwright package is needed (pip install -e '.[dev]', as make install does)")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is needed (make install installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _context(browser: Any, requests: list[str], problems: list[str]) -> Any:
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(30_000)
    context.on("request", lambda r: requests.append(r.url))
    # a request cut because the page moved on (a log follow, a refresh in flight) is no failure,
    # nor one the machine's network changing failed (tests/console_browser.py: the console retries it)
    context.on(
        "requestfailed",
        lambda r: (
            problems.append(f"failed {r.url}: {r.failure}")
            if not any(e in (r.failure or "") for e in ("ERR_ABORTED", NETWORK_CHANGED))
            else None
        ),
    )

    def console_message(msg: Any) -> None:
        if "Content Security Policy" in msg.text or "Refused to" in msg.text:
            problems.append(msg.text)

    context.on("console", console_message)
    context.on("weberror", lambda e: problems.append(f"page error: {e.error}"))
    return context


def test_a_tenant_runs_and_cancels_a_container_and_manages_tokens_in_the_console(
    serve: Callable[..., ApiServer],
    sqlite_url: str,
    kubeconfig: Path,
    k8s: Any,
    node_logs: Any,
    browser: Any,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    api = serve(sqlite_url, kubeconfig)
    with api.client() as admin:
        token = new_tenancy(admin, "console")
    mark_tenancy_ready(k8s, "console")
    shots = tmp_path / "console-shots"
    shots.mkdir()
    requests: list[str] = []
    problems: list[str] = []
    context = _context(browser, requests, problems)
    page = context.new_page()

    goto(page, f"{api.base_url}/console")
    page.wait_for_selector("#signin")
    page.screenshot(path=shots / "sign-in.png")
    page.fill("#token", token)
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#containers")
    assert token not in page.url
    assert page.evaluate("Object.values(sessionStorage)") == [token]
    assert page.evaluate("localStorage.length") == 0
    assert page.text_content("#who") == "console · test (admin)"
    assert page.locator("nav a").all_text_contents() == [
        "Containers",
        "Usage",
        "Volumes",
        "Secrets",
        "Registry credentials",
        "Tokens",
        "Audit",
    ]

    # a volume: created through its page, listed with its size (no provisioner here: Pending)
    page.click("nav >> text=Volumes")
    page.fill("#volume-name", "scratch")
    page.fill("#volume-size", "1Gi")
    page.click("#volume-form button[type=submit]")
    page.wait_for_selector("#list >> text=scratch")
    assert "1Gi" in page.text_content("#list")
    page.fill("#volume-name", "Bad_Name")
    page.fill("#volume-size", "1Gi")
    page.click("#volume-form button[type=submit]")
    page.wait_for_selector("#form-message >> text=name")  # the API's 422, naming the field

    # a secret and a registry credential: written, listed, never shown
    page.click("nav >> text=Secrets")
    page.fill("#secret-name", "hf")
    page.fill("#secret-value", "hf_s3cret_value")
    page.click("#secret-form button[type=submit]")
    page.wait_for_selector("#list >> text=hf")
    page.click("nav >> text=Registry credentials")
    page.fill("#registry-server", "registry.example.com")
    page.fill("#registry-username", "robot")
    page.fill("#registry-password", "pull_s3cret_value")
    page.click("#registry-form button[type=submit]")
    page.wait_for_selector("#list >> text=registry.example.com")
    page.screenshot(path=shots / "registry-credentials.png")

    # submit a 2-GPU container, with a variable and the secret as another
    page.click("nav >> text=Containers")
    page.click("text=New container")
    page.fill("#image", "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04")
    page.select_option("#gpus", "2")
    page.fill("#env", "EPOCHS=3")
    page.fill("#secret-env", "HF_TOKEN=hf")
    page.fill("#ports", "8888, 6006:public")
    page.check("#interruptible")
    page.screenshot(path=shots / "new-container.png")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r"#/containers/[0-9a-f]+$"))
    cid = page.url.rsplit("/", 1)[1]
    ns, pod = "tenant-console", f"gpucaas-{cid}"
    with api.client(token) as c:
        submitted = c.get(f"/v1/containers/{cid}").json()
    assert submitted["gpus"] == 2 and submitted["env"]["HF_TOKEN"] == {"secret": "hf"}
    assert set(submitted["env"]) == {"EPOCHS", "HF_TOKEN"}
    assert submitted["ports"] == [{"port": 8888, "public": False}, {"port": 6006, "public": True}]
    assert submitted["interruptible"] is True
    expect(page.locator("#container-class")).to_have_text("interruptible")
    endpoint = f"https://{cid}-6006.endpoints.gpucaas.internal"
    page.wait_for_selector(f"#endpoints >> text={endpoint}")
    assert "port 8888, private" in page.text_content("#endpoints")
    assert page.locator("#endpoints a.endpoint").nth(1).get_attribute("href") == endpoint

    # the scheduler and the kubelet: bound to the logs node, running, writing its log
    wait_for(lambda: get_pod(k8s, ns, pod), 60, what="the API's pod")
    node_logs.write(ns, pod, "step 1\n")
    started = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    set_pod_status(
        k8s,
        ns,
        pod,
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "image": "x",
                    "imageID": "",
                    "state": {"running": {"startedAt": started}},
                }
            ],
        },
    )
    page.wait_for_selector("#container-status >> text=Running")
    expect(page.locator("#log")).to_contain_text("step 1")  # (no wait_for_function: the CSP forbids eval)
    node_logs.write(ns, pod, "step 2\nloss 0.42\n")
    expect(page.locator("#log")).to_contain_text("loss 0.42")
    assert page.text_content("#log") == "step 1\nstep 2\nloss 0.42\n"
    page.wait_for_selector("#timeline table")
    page.screenshot(path=shots / "container.png", full_page=True)

    # a second one, submitted with the API, waits for GPUs: the list says why
    with api.client(token) as c:
        waiting = c.post("/v1/containers", json={"image": "nvcr.io/nvidia/pytorch:24.05-py3", "gpus": 4}).json()["id"]
    wait_for(lambda: get_pod(k8s, ns, f"gpucaas-{waiting}"), 60, what="the second pod")
    set_pod_status(
        k8s,
        ns,
        f"gpucaas-{waiting}",
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    )
    goto(page, f"{api.base_url}/console/#/containers")
    page.wait_for_selector(f"#containers >> text={cid}")
    page.wait_for_selector("#containers >> text=Insufficient nvidia.com/gpu")
    page.wait_for_selector("#containers >> text=Running")
    page.screenshot(path=shots / "containers.png")
    goto(page, f"{api.base_url}/console/#/usage")
    page.wait_for_selector("#usage-chart >> text=GPU-seconds")
    page.wait_for_selector("#usage-runs table")
    page.screenshot(path=shots / "usage.png", full_page=True)

    # cancel it (two clicks: no dialog)
    goto(page, f"{api.base_url}/console/#/containers/{cid}")
    page.click("#cancel")
    page.click("#cancel")
    page.wait_for_selector("#container-status >> text=Cancelled")
    page.wait_for_selector("#endpoints >> text=None: the container has ended.")
    with api.client(token) as c:
        assert c.get(f"/v1/containers/{cid}").json()["status"] == "Cancelled"

    # mint a read token named dash; its console offers neither submission nor tokens
    goto(page, f"{api.base_url}/console/#/tokens")
    page.fill("#token-name", "dash")
    page.select_option("#token-scope", "read")
    page.click("#token-form button[type=submit]")
    minted = page.text_content("#minted-token")
    assert minted and minted.startswith("gpc_")
    page.wait_for_selector("#list >> text=dash")
    page.screenshot(path=shots / "tokens.png", full_page=True)
    reader = context.new_page()
    goto(reader, f"{api.base_url}/console/")
    reader.evaluate("sessionStorage.clear()")  # a new tab's session: signed out
    reload(reader)
    reader.fill("#token", minted)
    reader.click("#signin button[type=submit]")
    reader.wait_for_selector("#containers")
    assert reader.locator("nav a").all_text_contents() == [
        "Containers",
        "Usage",
        "Volumes",
        "Secrets",
        "Registry credentials",
    ]
    assert reader.locator("text=New container").count() == 0
    reader.click("nav >> text=Volumes")
    reader.wait_for_selector("#list >> text=scratch")
    assert reader.locator("#volume-form").count() == 0  # a read token may look, not create
    goto(reader, f"{api.base_url}/console/#/containers/{cid}")
    reader.wait_for_selector("#container-status >> text=Cancelled")
    assert reader.locator("#cancel").count() == 0
    reader.close()

    # revoke it
    row = page.locator("#list tr", has_text="dash")
    row.locator("button").click()
    row.locator("button").click()
    expect(page.locator("#list")).not_to_contain_text("dash")
    with api.client(token) as c:
        assert [t["name"] for t in c.get("/v1/tokens").json()["data"]] == ["test"]
    with api.client(minted) as d:
        assert d.get("/v1/whoami").status_code == 401
    goto(page, f"{api.base_url}/console/#/audit")
    page.wait_for_selector("#audit >> text=token.revoke")
    page.screenshot(path=shots / "audit.png", full_page=True)

    page.click("#signout")
    page.wait_for_selector("#signin")
    assert page.evaluate("sessionStorage.length") == 0
    context.close()

    assert problems == []
    assert not [u for u in requests if "s3cret" in u or token in u], "a secret in a URL"
    assert requests
    outside = [u for u in requests if urlsplit(u).scheme != "data" and urlsplit(u).hostname != "127.0.0.1"]
    assert outside == [], outside
    if os.environ.get("GPUCAAS_UPDATE_DOCS_IMAGES"):  # the docs' picture, refreshed on request only
        DOCS_SHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shots / "containers.png", DOCS_SHOT)


def test_ports_volumes_and_endpoints_appear_once_the_api_offers_them(module_api: ApiServer, browser: Any) -> None:
    """The console reads /openapi.json: with ``ports`` in ContainerCreate and ``endpoints`` in
    ContainerPublic (which the API has not yet: here added to its schema alone) beside its
    volumes, the form fields, the page and the section appear."""
    with module_api.client() as admin:
        token = new_tenancy(admin, "features")
    app = module_api.app
    spec = app.openapi()
    saved = app.openapi_schema
    offered = {
        **spec,
        "paths": {**spec["paths"], "/v1/volumes": {"get": {"responses": {}}}},
        "components": {**spec["components"], "schemas": {**spec["components"]["schemas"]}},
    }
    schemas = offered["components"]["schemas"]
    for name, field in (("ContainerCreate", "ports"), ("ContainerCreate", "volumes"), ("ContainerPublic", "endpoints")):
        schemas[name] = {**schemas[name], "properties": {**schemas[name]["properties"], field: {}}}
    app.openapi_schema = offered
    requests: list[str] = []
    problems: list[str] = []
    context = _context(browser, requests, problems)
    try:
        page = context.new_page()
        goto(page, f"{module_api.base_url}/console/")
        page.fill("#token", token)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("#containers")
        assert "Volumes" in page.locator("nav a").all_text_contents()
        goto(page, f"{module_api.base_url}/console/#/new")
        page.wait_for_selector("#submit-form")
        assert page.locator("#ports").count() == 1 and page.locator("#volumes").count() == 1
        with module_api.client(token) as c:
            cid = c.post("/v1/containers", json={"image": "busybox:1.36"}).json()["id"]
        goto(page, f"{module_api.base_url}/console/#/containers/{cid}")
        page.wait_for_selector("#endpoints >> text=None.")
    finally:
        app.openapi_schema = saved
        context.close()
    assert problems == []


def test_a_read_cut_by_the_network_is_sent_again_and_a_write_is_not(module_api: ApiServer, browser: Any) -> None:
    """A GET that fails before any response (here the browser's request aborted as if the
    network had gone: fetch rejects with a TypeError) is sent again and the page shows its
    answer; a DELETE cut the same way is not repeated, and its failure is shown."""
    with module_api.client() as admin:
        token = new_tenancy(admin, "flaky-network")
    with module_api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "busybox:1.36"}).json()["id"]
    context = browser.new_context(ignore_https_errors=True)
    context.set_default_timeout(30_000)
    seen: dict[str, int] = {}

    def cut_first(route: Any) -> None:
        key = f"{route.request.method} {urlsplit(route.request.url).path}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            route.abort("internetdisconnected")
        else:
            route.continue_()

    try:
        page = context.new_page()
        goto(page, f"{module_api.base_url}/console/")
        context.route("**/v1/whoami", cut_first)
        context.route("**/openapi.json", cut_first)
        page.fill("#token", token)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("#containers")
        assert seen == {"GET /v1/whoami": 2, "GET /openapi.json": 2}
        context.route(f"**/v1/containers/{cid}", cut_first)
        goto(page, f"{module_api.base_url}/console/#/containers/{cid}")
        page.wait_for_selector("#cancel")  # the container's own page, from the GET sent again
        assert seen[f"GET /v1/containers/{cid}"] >= 2
        page.click("#cancel")
        page.click("#cancel")
        page.wait_for_selector("#main .error")
        assert seen[f"DELETE /v1/containers/{cid}"] == 1
        with module_api.client(token) as c:
            assert c.get(f"/v1/containers/{cid}").json()["status"] != "Cancelled"
    finally:
        context.close()
