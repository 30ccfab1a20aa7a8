"""`python -m gpucaas` is the `gpucaas` command."""

from gpucaas.cli import app

app()
