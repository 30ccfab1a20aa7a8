"""The ``gpucaas`` server-side command: one sub-command per service.

Each service's ``cli.py`` holds a ``command`` function (typer options only; heavy
imports happen inside it), registered here.
"""

from __future__ import annotations

import typer

from gpucaas import __version__

app = typer.Typer(
    name="gpucaas",
    help="gpucaas control plane services. Each sub-command runs one service.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the gpucaas version."""
    typer.echo(__version__)


# Service registrations (one line per service; keep alphabetical).
