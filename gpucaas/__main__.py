"""`python -m gpucaas` is the `gpucaas` command (node daemons start lean: see gpucaas/entry.py)."""

from gpucaas.entry import main

main()
