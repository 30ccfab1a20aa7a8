"""Settings of the fabric service (``gpucaas fabric``), env prefix ``GPUCAAS_FABRIC_``.

Built once by :func:`get_settings` (or directly in tests) and passed down; nothing
else in the service reads the environment.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.fabric_client import DEFAULT_SOCKET


class FabricSettings(BaseSettings):
    """Everything ``gpucaas fabric`` can be told. Each field is ``GPUCAAS_FABRIC_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_FABRIC_", extra="ignore")

    # --- node and local API -----------------------------------------------------------
    node_name: str = Field("localhost", description="Kubernetes node this service runs on (FabricState name).")
    socket: Path = Field(Path(DEFAULT_SOCKET), description="Unix socket of the local API.")
    socket_mode: int = Field(0o660, description="Permission bits of the local API socket.")
    state_dir: Path = Field(
        Path("/run/gpucaas/fabric"),
        description="Activation records (activations.json); kept across service restarts, dropped after a "
        "node reboot (boot id), which resets every GPU.",
    )
    sysfs_root: Path = Field(Path("/sys"), description="Root of sysfs (tests point it at a fake tree).")

    # --- Fabric Manager ---------------------------------------------------------------
    fm_backend: Literal["nvfm", "simulator"] = Field(
        "nvfm",
        description="nvfm: NVIDIA's libnvfm (the default; a missing library stops the service "
        "with the fix). simulator: only when asked for (sandbox, tests, development).",
    )
    fm_address: str = Field(
        "10.254.254.2:6666", description="Fabric Manager API address inside the service VM (host:port or unix path)."
    )
    fm_library: Path | None = Field(None, description="Path to libnvfm.so (default: found by the loader).")
    board: Path | None = Field(
        None, description="Simulator only: board description (board.json) giving physical id -> PCI."
    )
    fm_call_deadline_s: float = Field(
        5.0,
        gt=0,
        le=120,
        description="Longest wait for one Fabric Manager call; an overrun counts as "
        "FM unavailable (a silent FM blocks libnvfm calls ~70 s).",
    )
    fm_connect_params_version: int | None = Field(
        None,
        ge=1,
        le=2,
        description="fmConnectParams version for libnvfm, 1 or 2 (default: v2 for a 550+ library, else v1).",
    )
    platform: str | None = Field(
        None,
        description="GPU layout (physical id = module id -> PCI address): a shipped name "
        "(dgx-h100, supermicro-hgx-h100) or a JSON/YAML file (e.g. a mounted ConfigMap). "
        "Default: the shipped layout that sysfs matches (the simulator: its board).",
    )
    gpu_reset: bool = Field(True, description="Reset GPUs through sysfs before their partition is activated.")
    fabric_reset_policy: Literal["flag", "evict"] = Field(
        "flag",
        description="Pods whose NVLink partition a service VM restart destroyed: flag (Event + "
        "conditions, the pod keeps running without NVLink) or evict (Eviction API).",
    )
    simulator_h100: bool = Field(
        True, description="Simulator only: behave as FM on H100 (empty PCI bus ids, no degradation lists)."
    )
    simulator_restart_timeout_s: float = Field(
        60.0, gt=0, description="Simulator only: restart mode exits without the activated list after this."
    )
    simulate_fm_in_vm: bool = Field(
        True, description="Simulator only: treat a service VM restart as a Fabric Manager restart (FM lives in the VM)."
    )
    fm_connect_timeout_s: float = Field(
        60.0, gt=0, description="How long to wait for Fabric Manager after a (re)start."
    )
    release_grace_s: float = Field(30.0, ge=0, description="Grace of /v1/activations/sync when the request gives none.")
    reconcile_interval_s: float = Field(
        5.0, gt=0, description="How often Fabric Manager state is checked against the records."
    )

    # --- service VM (libvirt) ---------------------------------------------------------
    vm_enabled: bool = Field(True, description="Run the Fabric Manager service VM under libvirt.")
    libvirt_uri: str = Field("qemu:///system", description="libvirt connection URI.")
    domain_name: str = Field("gpucaas-fabric", description="libvirt domain name of the service VM.")
    domain_type: Literal["kvm", "qemu", "test"] = Field(
        "kvm", description="Domain type: kvm in production, qemu for software emulation in tests."
    )
    domain_template: Path | None = Field(
        None, description="Domain XML template (default: vm_images/domain/service-vm.xml)."
    )
    vcpus: int = Field(2, ge=1, le=64, description="vCPUs of the service VM.")
    memory_mib: int = Field(4096, ge=64, description="Memory of the service VM in MiB.")
    disk_image: Path | None = Field(
        None, description="Service VM disk image (qcow2) built by vm_images/service-vm/build.sh."
    )
    kernel: Path | None = Field(
        None, description="Direct-boot kernel (with initrd; the disk, if any, is attached as vda)."
    )
    initrd: Path | None = Field(None, description="Direct-boot initramfs (with kernel).")
    kernel_cmdline: str = Field(
        "console=ttyS0 root=LABEL=fabricvm ro quiet", description="Kernel command line for direct boot."
    )
    fm_channel: Literal["network", "unix", "none"] = Field(
        "network",
        description="How the host reaches Fabric Manager: a private libvirt network or a virtio-serial unix socket.",
    )
    fm_network: str = Field("gpucaas-fabric", description="Isolated libvirt network for fm_channel=network.")
    fm_channel_socket: Path = Field(
        Path("/run/gpucaas/fabric-fm.sock"),
        description="Host unix socket of the virtio-serial channel (fm_channel=unix).",
    )
    console_log: Path | None = Field(None, description="Write the VM's serial console to this file (else a pty).")
    nvswitches: str = Field(
        "", description="Comma-separated NVSwitch PCI addresses to pass through (default: discovered in sysfs)."
    )
    memory_controller: str | None = Field(
        None, description="NVSwitch memory controller PCI address (default: discovered)."
    )
    passthrough: bool = Field(
        True, description="Pass the NVSwitches and memory controller to the VM as managed hostdevs."
    )
    watch_interval_s: float = Field(1.0, gt=0, description="Service VM state polling interval.")
    vm_events: bool = Field(True, description="Also watch libvirt lifecycle events (a crash is seen at once).")
    restart_backoff_initial_s: float = Field(1.0, gt=0, description="First delay before restarting a crashed VM.")
    restart_backoff_max_s: float = Field(60.0, gt=0, description="Largest restart delay (doubles each crash).")
    restart_stable_s: float = Field(120.0, gt=0, description="Uptime after which the restart backoff resets.")
    stop_vm_on_exit: bool = Field(False, description="Shut the service VM down when the service stops.")
    stop_timeout_s: float = Field(30.0, gt=0, description="Graceful shutdown wait before the VM is destroyed.")

    # --- Kubernetes -------------------------------------------------------------------
    publish: bool = Field(True, description="Publish the FabricState custom resource for this node.")
    publish_interval_s: float = Field(15.0, gt=0, description="Republish at least this often.")
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: in-cluster config).")

    @field_validator("nvswitches", mode="before")
    @classmethod
    def _check_bdfs(cls, value: object) -> str:
        from services.fabric.discovery import normalize_bdf

        items = value.split(",") if isinstance(value, str) else list(value or [])  # type: ignore[call-overload]
        return ",".join(normalize_bdf(str(v), field="nvswitches") for v in items if str(v).strip())

    @property
    def nvswitch_addresses(self) -> list[str]:
        return [v for v in self.nvswitches.split(",") if v]

    @field_validator("memory_controller")
    @classmethod
    def _check_mc(cls, value: str | None) -> str | None:
        from services.fabric.discovery import normalize_bdf

        return None if not value else normalize_bdf(value, field="memory_controller")

    @model_validator(mode="after")
    def _cross_checks(self) -> FabricSettings:
        if (self.kernel is None) != (self.initrd is None):
            raise ValueError("kernel and initrd must be given together (direct boot), or neither")
        if self.vm_enabled and self.kernel is None and self.disk_image is None:
            raise ValueError("vm_enabled needs disk_image and/or kernel+initrd (or vm_enabled=false)")
        if self.restart_backoff_max_s < self.restart_backoff_initial_s:
            raise ValueError("restart_backoff_max_s must be >= restart_backoff_initial_s")
        return self

    def redacted(self) -> dict[str, object]:
        """The effective configuration, for the start-up log line (nothing secret here)."""
        return {k: str(v) if isinstance(v, Path) else v for k, v in self.model_dump().items()}


@cache
def get_settings() -> FabricSettings:
    return FabricSettings()
