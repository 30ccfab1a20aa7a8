"""Settings of GPU leases: the node agent (env prefix ``GPUCAAS_``, names kept from the chart) and the
controller-side timers (env prefix ``GPUCAAS_CONTROLLER_``, as the rest of ``gpucaas controller``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LeaseAgentSettings(BaseSettings):
    """The node side of GPU leases; each field is ``GPUCAAS_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_", extra="ignore")

    leases: bool = Field(
        False,
        description="Keep GPULeases in step with allocations and run the firmware check between tenants "
        "(needs the Kubernetes API; the Helm chart and the sandbox turn it on).",
    )
    kubeconfig: Path | None = Field(
        None, description="kubeconfig for lease updates; unset = in-cluster, then KUBECONFIG."
    )
    firmware_golden_file: Path | None = Field(
        None,
        description="JSON of accepted expansion-ROM SHA-256s and versions per PCI device id "
        '({"0x2330": {"sha256": [...], "versions": [...]}}); without it every check fails '
        "with NoGoldenFirmware and the GPU is quarantined.",
    )
    firmware_rom_toggle: bool = Field(
        True, description="Write 1/0 to the sysfs rom attribute around the read; off only for fake sysfs trees."
    )
    lease_interval: float = Field(
        1.0, gt=0, description="Seconds between lease rounds (PodResources -> leases, checks)."
    )
    gpu_reset: bool = Field(
        True,
        description="Reset a released GPU through sysfs (the kernel's reset_method, secondary bus reset "
        "preferred) before its firmware check, as the shared NVSwitch model requires.",
    )


class LeaseTimerSettings(BaseSettings):
    """The cluster side of GPU leases, in the controller's process; each field is ``GPUCAAS_CONTROLLER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_CONTROLLER_", extra="ignore")

    gpu_leases: bool = Field(
        True,
        description="Run the GPULease timers in this process (Releasing -> Checking, check retries and "
        "time-outs, holders that vanished while their node was down); off only where no "
        "GPULease CRD is installed (tests of the tenancy handlers alone).",
    )
