"""``gpucaas device-plugin``: the vfio CDI device plugin (a DaemonSet on GPU nodes).

Options are generated from :class:`services.device_plugin.settings.DevicePluginSettings`
(env ``GPUCAAS_<NAME>``) and the core's logging settings: flag > env > default; see
docs/configuration.md.
"""

from __future__ import annotations

from gpucaas.core.logging import LoggingSettings, configure_logging
from gpucaas.core.settings_cli import Section, settings_command
from services.device_plugin.settings import DevicePluginSettings


@settings_command(DevicePluginSettings, Section(LoggingSettings, "log-"), name="device-plugin")
def command(settings: DevicePluginSettings, logging_settings: LoggingSettings) -> None:
    """Run the vfio CDI device plugin: advertise vfio GPUs, write the CDI spec, serve the kubelet."""
    from services.device_plugin.main import run

    configure_logging(logging_settings)
    run(settings)
