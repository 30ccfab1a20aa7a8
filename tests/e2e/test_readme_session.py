"""Every command of the README's short session, run against the sandbox as a newcomer would.

The README's console block is parsed (``$ `` lines and their ``\\`` continuations); paths
under ``.sandbox/`` and the URL point at this sandbox, and the container id the first
request answers replaces the one printed in the README. curl runs with
``--fail-with-body`` so that an HTTP error fails the test; caasctl runs as installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.sandbox import runner
from tests.e2e.conftest import Caller, wait_status

#: its outcome does not depend on the allocation mode: the device-plugin run proves it
pytestmark = pytest.mark.any_allocation

ROOT = Path(__file__).resolve().parents[2]
README_ID = "d7a3556918ebc3aba0e7"


def session_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## A short session", 1)[1].split("```console", 1)[1].split("```", 1)[0]
    commands: list[str] = []
    current: list[str] | None = None
    for line in block.splitlines():
        if line.startswith("$ "):
            current = [line[2:]]
        elif current is None:
            continue
        else:
            current.append(line.strip())
        if current is not None and not current[-1].endswith("\\"):
            commands.append(" ".join(part.rstrip("\\").strip() for part in current))
            current = None
    return commands


def test_the_readme_session_runs_as_written(sandbox: runner.Sandbox) -> None:
    commands = session_commands()
    assert sum(c.startswith("curl ") for c in commands) >= 3 and any(c.startswith("caasctl ") for c in commands)
    state = str(sandbox.state_dir)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("GPUCAAS_TOKEN", None)
    cid = None
    for command in commands:
        line = command.replace("$PWD/.sandbox/", f"{state}/").replace(".sandbox/", f"{state}/")
        line = line.replace("https://127.0.0.1:8443", sandbox.api_url)
        if line.startswith("source "):  # the venv is this interpreter's; the config path is kept
            env["GPUCAAS_CONFIG"] = re.search(r"GPUCAAS_CONFIG=(\S+)", line).group(1)  # type: ignore[union-attr]
            continue
        if cid is not None:
            line = line.replace(README_ID, cid)
        if line.startswith("curl "):
            line = line.replace("curl ", "curl -sS --fail-with-body ", 1)
            if line.endswith("/logs"):  # the log exists once the container runs
                wait_status(Caller(sandbox, sandbox.tenant_token or ""), cid or "", "Running", "Succeeded")
        done = subprocess.run(
            ["bash", "-c", line], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180, check=False
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        if cid is None and line.startswith("curl ") and " -d " in line:
            cid = json.loads(done.stdout)["id"]
    assert cid is not None
