"""The ``gpucaas`` server-side command: one sub-command per process.

A service that has a process of its own holds its ``command`` in its ``cli.py`` (options
only; its ``main.run`` builds and runs it; heavy imports happen inside). Where several
services share a process, the command is composed here, in the programs floor, from
their ``cli.py`` options and ``main.py`` builders: ``gpu_node`` (device plugin + GPU-lease
agent), ``dra_node`` (DRA driver + GPU-lease agent), ``controller`` (tenancy controller +
GPU-lease timers).

``sandbox`` (a whole local cluster with real nodes) is a development tool: it lives in
``devtools``, which the wheel does not ship, so it is registered only where that tree is
importable (a source checkout's ``gpucaas`` has it; an installed wheel's does not).
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

from gpucaas import __version__, controller, dra_node, gpu_node
from gpucaas.doctor import cli as doctor_cli
from services.api import cli as api_cli
from services.fabric import cli as fabric_cli
from services.placement import cli as placement_cli

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


# Service registrations (one line per service).
app.command("device-plugin")(gpu_node.command)
app.command("api")(api_cli.command)
app.command("controller")(controller.command)
app.command("scheduler-extender")(placement_cli.command)
app.command("doctor")(doctor_cli.command)
app.command("fabric")(fabric_cli.command)
app.command("dra-driver")(dra_node.command)

# The wheel ships no devtools (and the floors forbid a static import of it): a source
# checkout's gpucaas has the sandbox, an installed wheel's does not. find_spec on the
# submodule would raise without its parent, hence the two steps.
if importlib.util.find_spec("devtools") is not None and importlib.util.find_spec("devtools.sandbox") is not None:
    app.command("sandbox")(importlib.import_module("devtools.sandbox.cli").command)
