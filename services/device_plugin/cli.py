"""Command-line options of the device plugin.

The plugin runs in a GPU node's process beside the GPU-lease node agent: its command,
``gpucaas device-plugin``, is composed in ``gpucaas/gpu_node.py`` from these
options and the agent's. Every option also reads its environment variable
(``GPUCAAS_<NAME>``, names kept from the chart); see docs/configuration.md.
"""

from __future__ import annotations

from core.settings_cli import Section
from services.device_plugin.settings import DevicePluginSettings

#: ``--node-name``, ``--resource-name``, ``--fabric-socket``...
OPTIONS = Section(DevicePluginSettings)
