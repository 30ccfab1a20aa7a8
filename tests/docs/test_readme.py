"""README.md: short, the two set-up commands, links that stay inside the repository, and a
session whose every command exists (caasctl sub-commands and options through the typer app,
curl paths and methods in the API's OpenAPI document)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from gpucaas.caasctl.main import app as caasctl_app
from gpucaas.cli import app as gpucaas_app
from services.api.app import create_app
from services.api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def session_commands() -> list[str]:
    """The `$ ` lines of the README's session block, continuation lines joined."""
    section = README.split("## A short session", 1)[1].split("\n## ", 1)[0]
    block = section.split("```console", 1)[1].split("```", 1)[0]
    commands: list[str] = []
    pending: str | None = None
    for line in block.splitlines():
        if pending is not None:
            pending += " " + line.strip()
        elif line.startswith("$ "):
            pending = line[2:].strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        commands.append(pending.split("  #", 1)[0].strip())
        pending = None
    return commands


COMMANDS = session_commands()


def test_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_readme_has_the_two_setup_commands() -> None:
    block = README.split("## Set-up: the two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make sandbox", "make test"]


def test_readme_links_stay_inside_the_repository() -> None:
    for target in re.findall(r"\]\(([^)]+)\)", README):
        assert not target.startswith(("http:", "https:", "/", "..")), target
        assert (ROOT / target.split("#", 1)[0]).exists(), f"README links to a missing file: {target}"


def test_no_seed_in_user_facing_text() -> None:
    texts = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "gpucaas").rglob("*.py")),
        *sorted((ROOT / "services").glob("*/cli.py")),
    ]
    offenders = [str(p.relative_to(ROOT)) for p in texts if re.search(r"\bseed", p.read_text(), re.IGNORECASE)]
    assert offenders == []


def test_session_has_tenant_and_admin_commands() -> None:
    firsts = [shlex.split(c)[0] for c in COMMANDS]
    assert "curl" in firsts and "caasctl" in firsts


def _caasctl_commands() -> list[list[str]]:
    return [shlex.split(c)[1:] for c in COMMANDS if c.startswith("caasctl ")]


@pytest.mark.parametrize("args", _caasctl_commands(), ids=" ".join)
def test_caasctl_command_in_the_session_exists(args: list[str]) -> None:
    # --help is eager but parsed last: an unknown sub-command or option still fails (exit 2).
    # (before a `--`, after which everything is the container's command)
    cut = args.index("--") if "--" in args else len(args)
    result = CliRunner().invoke(caasctl_app, [*args[:cut], "--help", *args[cut:]])
    assert result.exit_code == 0, result.output


def test_gpucaas_commands_named_in_the_readme_exist() -> None:
    named = set(re.findall(r"`(?:\.venv/bin/)?gpucaas ([a-z-]+)", README))
    assert named, "the README names no gpucaas command"
    commands = get_command(gpucaas_app).commands  # type: ignore[attr-defined]
    assert named <= set(commands), named - set(commands)


def _curl_requests() -> list[tuple[str, str, list[str]]]:
    requests = []
    for c in COMMANDS:
        words = shlex.split(c)
        if words[0] != "curl":
            continue
        url = next(w for w in words if w.startswith("https://"))
        headers = [words[i + 1] for i, w in enumerate(words) if w == "-H"]
        method = "POST" if "-d" in words else "GET"
        if "-X" in words:
            method = words[words.index("-X") + 1]
        requests.append((method, "/" + url.split("/", 3)[3], headers))
    return requests


@pytest.fixture(scope="module")
def openapi_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    db = tmp_path_factory.mktemp("api") / "openapi.db"
    doc = create_app(Settings(database_url=f"sqlite:///{db}")).openapi()
    return {path: {m.upper() for m in ops} for path, ops in doc["paths"].items()}


def _matches(template: str, path: str) -> bool:
    return re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path) is not None


@pytest.mark.parametrize(("method", "path", "headers"), _curl_requests(), ids=lambda v: str(v)[:40])
def test_curl_request_in_the_session_exists(
    method: str, path: str, headers: list[str], openapi_paths: dict[str, set[str]]
) -> None:
    templates = [t for t in openapi_paths if _matches(t, path)]
    assert templates, f"{path} is not a path of the API"
    assert any(method in openapi_paths[t] for t in templates), f"{method} {path} is not an operation of the API"
    assert any(h.lower().startswith("authorization: bearer ") for h in headers)
    if method == "POST":
        assert "Content-Type: application/json" in headers
