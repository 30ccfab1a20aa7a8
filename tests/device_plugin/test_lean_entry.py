"""`gpucaas device-plugin` and `gpucaas fabric` start without the other services' imports
(issue 18: node daemons under 60 MB): no web framework, ORM, official Kubernetes client or
HTTP client package is loaded, and the options and help are the full CLI's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("fastapi", "uvicorn", "sqlalchemy", "kubernetes", "httpx", "kopf")


@pytest.mark.parametrize("command", ["device-plugin", "fabric"])
def test_node_daemon_commands_load_only_their_own_code(command: str) -> None:
    code = (
        "import json, sys\n"
        "from gpucaas.programs.entry import main\n"
        "try:\n"
        f"    main([{command!r}, '--help'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 0\n"
        f"print(json.dumps({{'code': code, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}
    assert f"gpucaas {command}" in out.stdout and "--log-level" in out.stdout


def test_other_commands_and_the_command_list_use_the_full_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "gpucaas", "--help"], capture_output=True, text=True, check=True)
    for command in ("api", "controller", "device-plugin", "fabric", "sandbox"):
        assert command in out.stdout
    bad = subprocess.run([sys.executable, "-m", "gpucaas", "device-plugin", "--no-such-option"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "No such option" in bad.stderr
