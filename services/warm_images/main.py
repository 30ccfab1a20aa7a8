"""Building the warm-image handlers: settings -> the registrar ``gpucaas controller`` adds.

The service has no process of its own: its handlers run in the controller's operator
(``gpucaas/controller.py``), beside the tenancy handlers and the GPU-lease timers.
"""

from __future__ import annotations

from typing import Any

from services.warm_images.settings import WarmImageSettings


def build(settings: WarmImageSettings) -> Any:
    """The ``register(registry, controller_settings)`` adding the handlers to the operator's registry."""
    from services.warm_images import controller  # Kopf and the Kubernetes client, only when hosted

    return controller.registrar(settings)
