"""Settings of the warm-image DaemonSet's controller, in ``gpucaas controller``'s process
(env prefix ``GPUCAAS_CONTROLLER_``, as the rest of that command)."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: the CRI's own pod sandbox image (containerd 2.4's default), present on every node
DEFAULT_HOLDER_IMAGE = "registry.k8s.io/pause:3.10.2"


class WarmImageSettings(BaseSettings):
    """Each field is ``GPUCAAS_CONTROLLER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_CONTROLLER_", extra="ignore")

    warm_images: bool = Field(
        True, description="Keep the WarmImages pulled on every GPU node (one DaemonSet, kept by the controller)."
    )
    warm_images_from_chart: list[str] = Field(
        default_factory=list,
        description="The chart's warmImages value (JSON list): the controller keeps a WarmImage for each, "
        "and removes the chart's WarmImages the list no longer names.",
    )
    warm_images_namespace: str = Field(
        "gpucaas-system", description="Namespace of the warm-image DaemonSet (the chart's release namespace)."
    )
    warm_images_daemonset: str = Field("gpucaas-warm-images", description="Name of the warm-image DaemonSet.")
    warm_images_holder_image: str = Field(
        DEFAULT_HOLDER_IMAGE,
        description="Image of the one container of each warm-image pod, which only holds the image volumes "
        "mounted; the CRI's pause image, which every node has.",
    )
    warm_images_node_selector: dict[str, str] = Field(
        default_factory=lambda: {"gpucaas.dev/gpu-node": "true"},
        description="Node labels of the GPU nodes (JSON), as the chart's gpuNodes.nodeSelector.",
    )
    warm_images_tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Tolerations of the GPU nodes' taints (JSON), as gpuNodes.tolerations."
    )
    warm_images_pull_secrets: list[str] = Field(
        default_factory=list,
        description="Names of image pull Secrets in the DaemonSet's namespace, for warm images from "
        "registries that need a login (JSON list).",
    )
    warm_images_resync_s: float = Field(
        60.0, gt=0, description="Seconds between comparisons of the DaemonSet with the WarmImages (drift repair)."
    )
