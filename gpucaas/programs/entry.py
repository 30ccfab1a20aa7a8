"""The ``gpucaas`` command's entry: node daemons start without the other services' imports.

``gpucaas.programs.cli.app`` registers every sub-command, which imports every service's
CLI module (the API's FastAPI and SQLAlchemy, Kopf...): about 75 MB
resident before a daemon does anything. A GPU node's daemons must stay small (issue 18:
under 60 MB each), so for the sub-commands in :data:`LEAN` this entry builds a typer app
holding that one command (the same function, so the same settings-generated options,
help and exit codes) and the full app only for everything else (``--help`` included).
Plain options (the way the chart and the sandbox start them) do not even need typer:
the command parses them itself (:meth:`gpucaas.core.settings_cli.SettingsCommand.run_plain`),
since typer converts every option with pydantic, 10 MB a node daemon's settings do without.
"""

from __future__ import annotations

import importlib
import sys

#: sub-command -> (module, function); the function is the one ``cli.py`` registers.
LEAN = {
    "device-plugin": ("gpucaas.programs.gpu_node", "command"),
    "fabric": ("services.fabric.cli", "command"),
}


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in LEAN:
        module, attr = LEAN[args[0]]
        command = getattr(importlib.import_module(module), attr)
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
    from gpucaas.programs.cli import app as full

    full(args=args, prog_name="gpucaas")
