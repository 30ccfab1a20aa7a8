"""Command-line options of warm images, taken by ``gpucaas controller`` beside its own
(``--warm-images/--no-warm-images``, ``--warm-images-holder-image``...; env ``GPUCAAS_CONTROLLER_<NAME>``)."""

from __future__ import annotations

from core.settings_cli import Section
from services.warm_images.settings import WarmImageSettings

CONTROLLER = Section(WarmImageSettings)
