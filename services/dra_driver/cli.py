"""Command-line options of the DRA kubelet plugin.

The driver runs in a GPU node's process beside the GPU-lease node agent: its command,
``gpucaas dra-driver``, is composed in ``gpucaas/dra_node.py`` from these
options and the agent's (``--lease-...``). Every option also reads its environment
variable; see docs/configuration.md.
"""

from __future__ import annotations

from core.settings_cli import Section
from services.dra_driver.settings import DraDriverSettings

#: ``--node-name``, ``--fabric-socket``, ``--binding-conditions``...
OPTIONS = Section(DraDriverSettings)
