"""The API documents itself without the internet: Swagger UI and ReDoc come from the API
(fastapi-offline's copies), every submit field has a description and an example, and /docs
renders in headless Chromium with every other host unreachable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api.harness import ApiServer


def test_every_submit_field_has_a_description_and_an_example(module_api: ApiServer) -> None:
    with module_api.client(None) as anon:
        spec = anon.get("/openapi.json").json()
    fields = spec["components"]["schemas"]["ContainerCreate"]["properties"]
    assert {"image", "container-url", "gpus", "env", "cpu", "memory", "shm_size", "nvlink"} <= set(fields)
    for name, field in fields.items():
        assert field.get("description"), f"{name} has no description"
        assert field.get("examples") or field.get("example") is not None, f"{name} has no example"


def test_docs_pages_load_their_assets_from_the_api(module_api: ApiServer) -> None:
    with module_api.client(None) as anon:
        pages = {path: anon.get(path) for path in ("/docs", "/redoc")}
        for page in pages.values():
            assert page.status_code == 200
            assert "cdn." not in page.text and "https://" not in page.text.replace(module_api.base_url, "")
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            r = anon.get(f"/static-offline-docs/{asset}")
            assert r.status_code == 200 and len(r.content) > 100_000, asset


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is needed (Debian package chromium, installed by make install)")


def _headless(api: ApiServer, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    """Chromium with no network but the API: every other host fails to resolve and a dead proxy
    takes whatever is not loopback."""
    return subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--ignore-certificate-errors",
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--no-first-run",
            "--virtual-time-budget=20000",
            "--window-size=1280,1600",
            *mode,
            f"{api.base_url}/docs",
        ],
        capture_output=True,
        text=True,
        timeout=None,
        check=False,
        cwd=tmp_path,
    )


def test_docs_render_in_headless_chromium_without_network(module_api: ApiServer, tmp_path: Path) -> None:
    dom = _headless(module_api, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'class="swagger-ui' in html
    assert html.count("opblock-summary-path") >= 10, "the operation list did not render"
    for path in ("/v1/containers", "/v1/secrets", "/v1/registry-credentials", "/v1/containers/{container_id}/events"):
        assert f'data-path="{path}"' in html, path
    shot = tmp_path / "docs.png"
    done = _headless(module_api, tmp_path, f"--screenshot={shot}")
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
