"""gpucaas, the top floor: the programs people run (``gpucaas``, ``caasctl``, the sandbox,
doctor) and the wiring of services that share a process. Programs import the development
tools, the services and the core; nothing below imports a program."""

from core import __version__ as __version__
