"""Command-line options of GPU leases.

The service has no process of its own: its node agent runs in a GPU node's process
(``gpucaas device-plugin``, ``gpucaas dra-driver``) and its timers in the controller's
(``gpucaas controller``). Those commands, composed in ``gpucaas``, take these
options beside their own; every option also reads its environment variable.
"""

from __future__ import annotations

from core.settings_cli import Section
from services.gpu_leases.settings import LeaseAgentSettings, LeaseTimerSettings

#: The node agent beside the device plugin: ``--leases``, ``--firmware-golden-file``... (env ``GPUCAAS_<NAME>``).
NODE_AGENT = Section(LeaseAgentSettings)
#: The node agent beside the DRA driver, whose own options would collide: ``--lease-leases``...
NODE_AGENT_BESIDE_DRA = Section(LeaseAgentSettings, "lease-")
#: The timers in the controller's process: ``--gpu-leases/--no-gpu-leases`` (env ``GPUCAAS_CONTROLLER_GPU_LEASES``).
TIMERS = Section(LeaseTimerSettings)
