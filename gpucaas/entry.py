"""The ``gpucaas`` command's entry: node daemons start without the other services' imports.

``gpucaas.cli.app`` registers every sub-command, which imports every service's
CLI module (the API's FastAPI and SQLAlchemy, Kopf...): about 75 MB resident before a
daemon does anything. A GPU node's daemons must stay small (under 60 MB each: a node runs
several beside the tenants' VMs), so for the sub-commands in :data:`LEAN` this entry
builds a typer app holding that one command (the same function, so the same settings-generated options,
help and exit codes) and the full app only for everything else (``--help`` included).
Plain options (the way the chart and the sandbox start them) do not even need typer:
the command parses them itself (:meth:`core.settings_cli.SettingsCommand.run_plain`),
since typer and click add 1.4 MB resident (rich more, for the help) a started daemon has
no use for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def _device_plugin() -> Any:
    from gpucaas.gpu_node import command

    return command


def _fabric() -> Any:
    from services.fabric.cli import command

    return command


#: sub-command -> what imports its command (the function ``cli.py`` registers), and nothing more.
LEAN: dict[str, Callable[[], Any]] = {"device-plugin": _device_plugin, "fabric": _fabric}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in LEAN:
        command = LEAN[args[0]]()
        if command.run_plain(args[1:]):
            return
        import typer

        app = typer.Typer(name="gpucaas", add_completion=False, no_args_is_help=True)

        @app.callback()
        def _group() -> None:
            """gpucaas control plane services (this node daemon only; `gpucaas --help` lists all)."""

        app.command(args[0])(command)
        app(args=args, prog_name="gpucaas")
        return
    from gpucaas.cli import app as full

    full(args=args, prog_name="gpucaas")
