"""Command-line options of the tenancy controller.

Its process, ``gpucaas controller``, hosts the GPU-lease timers beside its handlers: the
command is composed in ``gpucaas/controller.py`` from these options and the
timers'. Every option also reads its environment variable (``GPUCAAS_CONTROLLER_<NAME>``;
the kubeconfig also ``KUBECONFIG``): flag > env > default; see docs/configuration.md.
"""

from __future__ import annotations

from core.settings_cli import Section
from services.tenancy_controller.settings import ControllerSettings

#: ``--kubeconfig``, ``--peering``, ``--standalone``, ``--resync-interval-s``...
OPTIONS = Section(ControllerSettings)
