"""Device plugin settings: one pydantic-settings class, env prefix ``GPUCAAS_``.

Built once by :func:`get_settings` (the CLI passes its options as overrides) and
passed down; nothing else in the service reads the environment.
"""

from __future__ import annotations

import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.kubelet_dirs import KubeletDirs

KUBELET = KubeletDirs()

#: ``vendor.com/class``: a DNS-subdomain-like vendor and a class of [A-Za-z0-9_.-].
_KIND_RE = re.compile(
    r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
)
#: Extended resource name: ``domain/name`` (kubelet wants a qualified, non-kubernetes.io name).
_RESOURCE_RE = re.compile(
    r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
)


class DevicePluginSettings(BaseSettings):
    """Configuration of ``gpucaas device-plugin`` (flag > env ``GPUCAAS_*`` > default)."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    sysfs_root: Path = Field(Path("/sys"), description="Root of sysfs (a fake tree in tests and the sandbox).")
    dev_root: Path = Field(Path("/dev"), description="Root of /dev holding vfio/ and iommu.")
    device_plugin_dir: Path = Field(
        KUBELET.device_plugins,
        description="Kubelet device plugin directory: kubelet.sock and the plugin's own socket.",
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="Directory the CDI spec is written to.")
    resource_name: str = Field("nvidia.com/gpu", description="Extended resource advertised to the kubelet.")
    cdi_kind: str = Field("nvidia.com/gpu", description="CDI kind (vendor/class) of the spec and device names.")
    fabric_socket: Path | None = Field(
        Path("/run/gpucaas/fabric.sock"),
        description="Unix socket of the node's fabric service; empty disables it (PCI-order ids, no NVLink).",
    )
    fabric_required: bool = Field(
        True,
        description="Fail Allocate when the fabric service cannot activate the partition (unreachable "
        "included). False allows NVLink-less allocations while it is unreachable (boards without NVSwitch).",
    )
    fabric_timeout: float = Field(5.0, gt=0, description="Seconds per fabric service request.")
    fabric_poll_interval: float = Field(1.0, gt=0, description="Seconds between fabric topology/health polls.")
    fabric_sync_grace: float = Field(
        60.0, ge=0, description="Seconds an activation may live before the PodResources sync may release it."
    )
    allocate_conflict_wait: float = Field(
        5.0,
        ge=0,
        description="Seconds Allocate retries an activation conflict (a partition still being "
        "released by a pod that just ended) before it fails with ABORTED.",
    )
    allocate_fabric_wait: float = Field(
        20.0,
        ge=0,
        description="Seconds Allocate waits for an unreachable fabric service to answer again "
        "(restarting, as a DaemonSet pod is) before it fails with UNAVAILABLE: the kubelet does not retry a "
        "failed Allocate, it fails the pod (UnexpectedAdmissionError).",
    )
    pod_resources_socket: Path = Field(KUBELET.pod_resources_socket, description="Kubelet PodResources API socket.")
    pod_resources_interval: float = Field(10.0, gt=0, description="Seconds between PodResources scans.")
    health_interval: float = Field(
        1.0,
        gt=0,
        description="Seconds between sysfs / device node health checks (a GPU-lease change is "
        "applied at once, not at the next check).",
    )
    kubelet_watch_interval: float = Field(0.5, gt=0, description="Seconds between checks of kubelet.sock.")
    node_name: str = Field(
        default_factory=socket.gethostname,
        description="This node's name (logs, metrics).",
        json_schema_extra={"default_text": "the host name"},
    )
    metrics_port: int = Field(
        9402, ge=-1, le=65535, description="Prometheus port on 0.0.0.0; -1 disables, 0 picks one."
    )

    @field_validator("resource_name")
    @classmethod
    def _resource(cls, v: str) -> str:
        if not _RESOURCE_RE.match(v) or v.startswith(("kubernetes.io/", "requests.")):
            raise ValueError(f"resource_name must be 'domain/name' (e.g. nvidia.com/gpu), got {v!r}")
        return v

    @field_validator("cdi_kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if not _KIND_RE.match(v):
            raise ValueError(f"cdi_kind must be 'vendor.domain/class' (e.g. nvidia.com/gpu), got {v!r}")
        return v

    @field_validator("fabric_socket", mode="before")
    @classmethod
    def _empty_socket(cls, v: Any) -> Any:
        return None if v in ("", None) else v

    @model_validator(mode="after")
    def _absolute(self) -> DevicePluginSettings:
        for name in ("sysfs_root", "dev_root", "device_plugin_dir", "cdi_dir", "pod_resources_socket"):
            setattr(self, name, Path(getattr(self, name)).absolute())
        if self.fabric_socket is not None:
            self.fabric_socket = Path(self.fabric_socket).absolute()
        elif self.fabric_required:
            raise ValueError(
                "fabric_socket is empty (no fabric service) but fabric_required is true: "
                "set fabric_required=false (GPUCAAS_FABRIC_REQUIRED=false) to allow allocations "
                "without NVLink partition activation"
            )
        return self

    def summary(self) -> dict[str, Any]:
        """The effective configuration, for the start-up log line (nothing secret here)."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in self.model_dump().items()}


@lru_cache(maxsize=1)
def get_settings() -> DevicePluginSettings:
    return DevicePluginSettings()
