"""`python -m gpucaas` is the `gpucaas` command."""

from gpucaas.programs.cli import app

app()
