"""`python -m gpucaas` is the `gpucaas` command (node daemons start lean: see programs/entry.py)."""

from gpucaas.programs.entry import main

main()
