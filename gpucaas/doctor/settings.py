"""Settings of ``gpucaas doctor``: where the node's host paths are mounted, and thresholds.

The one source of the command's options (flag > env > default).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.kubelet_dirs import DEFAULT_ROOT


class DoctorSettings(BaseSettings):
    """``gpucaas doctor``; paths are ``GPUCAAS_<NAME>``, thresholds ``GPUCAAS_DOCTOR_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    sysfs_root: Path = Field(Path("/sys"), description="sysfs mount point.")
    dev_root: Path = Field(Path("/dev"), description="/dev mount point.")
    proc_root: Path = Field(Path("/proc"), description="/proc mount point.")
    etc_root: Path = Field(Path("/etc"), description="/etc directory.")
    containerd_config: Path | None = Field(
        None, description="containerd config (default: <etc-root>/containerd/config.toml)."
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="CDI spec directory.")
    kubelet_dir: Path = Field(DEFAULT_ROOT, description="kubelet root directory.")
    libvirt_socket: Path = Field(Path("/var/run/libvirt/libvirt-sock"), description="libvirtd socket.")
    fabric_socket: Path = Field(Path("/run/gpucaas/fabric.sock"), description="Fabric service socket.")
    kubeconfig: Path | None = Field(
        None,
        validation_alias=AliasChoices("GPUCAAS_DOCTOR_KUBECONFIG"),
        description="kubeconfig for the Kubernetes API check (default: in-cluster when run in a pod, else skipped).",
    )
    min_hugepages_gib: int = Field(
        16,
        ge=0,
        validation_alias=AliasChoices("GPUCAAS_DOCTOR_MIN_HUGEPAGES_GIB"),
        description="Hugepage memory (GiB) below which to warn.",
    )
    expect_nvswitches: bool = Field(
        False,
        validation_alias=AliasChoices("GPUCAAS_DOCTOR_EXPECT_NVSWITCHES"),
        description="Fail when no NVSwitch / memory controller is found (HGX boards).",
    )
