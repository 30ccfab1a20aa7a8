"""``gpucaas controller``: one Kopf operator hosting the tenancy controller's handlers and, beside
them, the GPU-lease timers and the warm-image DaemonSet's handlers (:mod:`services.warm_images`).

The composition root of the controller's process, as :mod:`gpucaas.gpu_node` is the
device plugin's: the two services never import each other. Both add their handlers to one
registry (:func:`services.tenancy_controller.main.build_registry`), so the operator's start-up
permission check, read from that registry, covers GPULeases too.

Why one process: the lease timers are a few Kopf timers on one resource; in the controller's
operator they share its peering (one active replica), its client and its Deployment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.logging import LoggingSettings, configure_logging
from core.settings_cli import Section, settings_command
from services.gpu_leases import cli as gpu_leases_cli
from services.gpu_leases.settings import LeaseTimerSettings
from services.tenancy_controller import cli as tenancy_controller_cli
from services.tenancy_controller.settings import ControllerSettings
from services.warm_images import cli as warm_images_cli
from services.warm_images.settings import WarmImageSettings

if TYPE_CHECKING:
    from services.tenancy_controller.main import Registrar


def registrars(timers: LeaseTimerSettings, warm: WarmImageSettings | None = None) -> tuple[Registrar, ...]:
    """What the operator hosts: the tenancy handlers and, unless turned off, the GPU-lease timers
    and the warm-image DaemonSet's handlers.

    Imported here, not at the top: ``gpucaas --help`` would otherwise load Kopf and the
    Kubernetes client."""
    from services.gpu_leases import controller as gpu_lease_timers
    from services.tenancy_controller import handlers as tenancy_handlers
    from services.warm_images import main as warm_images

    found: list[Registrar] = [tenancy_handlers.register]
    if timers.gpu_leases:
        found.append(gpu_lease_timers.register)
    if warm is not None and warm.warm_images:
        found.append(warm_images.build(warm))
    return tuple(found)


@settings_command(
    tenancy_controller_cli.OPTIONS,
    gpu_leases_cli.TIMERS,
    warm_images_cli.CONTROLLER,
    Section(LoggingSettings, "log-"),
    name="controller",
)
def command(
    settings: ControllerSettings,
    timers: LeaseTimerSettings,
    warm: WarmImageSettings,
    logging_settings: LoggingSettings,
) -> None:
    """Run the tenancy controller, the GPU-lease timers and the warm-image DaemonSet's handlers.

    The controller turns each Tenancy into its namespace, Cilium policy, quota, NFS storage
    and status."""
    from services.tenancy_controller.main import KOPF_LOG_LEVELS, run

    configure_logging(logging_settings, quieter=KOPF_LOG_LEVELS)
    run(settings, registrars(timers, warm))
