"""Configuration of ``gpucaas dra-driver``: one pydantic-settings class, env prefix ``GPUCAAS_DRA_``."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.kubelet_dirs import KubeletDirs

KUBELET = KubeletDirs()


class DraDriverSettings(BaseSettings):
    """Every knob of the DRA kubelet plugin; each field maps to ``GPUCAAS_DRA_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_DRA_", extra="ignore")

    node_name: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        description="This node's name (the pool name of its slices).",
        json_schema_extra={"default_text": "the host name"},
    )
    kubeconfig: Path | None = Field(None, description="kubeconfig file; unset = in-cluster, else ~/.kube/config.")
    registry_dir: Path = Field(KUBELET.plugins_registry, description="The kubelet's plugin registration directory.")
    plugins_dir: Path = Field(
        KUBELET.plugins,
        description="Where the driver's endpoint socket goes (<dir>/<driver>/dra.sock).",
    )
    state_dir: Path = Field(Path("/var/lib/gpucaas/dra"), description="Checkpoint of prepared claims.")
    fabric_socket: Path = Field(Path("/run/gpucaas/fabric.sock"), description="The fabric service's unix socket.")
    cdi_kind: str = Field("nvidia.com/gpu", description="CDI kind of the device plugin's spec (same CDI ids).")
    cdi_dir: Path | None = Field(
        None,
        description="Write the node's CDI spec here (the device plugin's spec, same builder) when the device "
        "plugin does not run on the node; unset = the device plugin writes it.",
    )
    sysfs_root: Path = Field(Path("/sys"), description="Root of sysfs, where the vfio GPUs of the CDI spec are found.")
    dev_root: Path = Field(Path("/dev"), description="Root of /dev holding vfio/ and iommu (CDI host paths).")
    binding_conditions: bool = Field(
        False,
        description="Publish devices with binding conditions and activate partitions before pods bind "
        "(Kubernetes 1.36+, feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus).",
    )
    advertise_gpus: bool = Field(
        True,
        description="Keep the node's GPU count as nvidia.com/gpu in its status capacity, so that pods may "
        "request it beside their claims (queueing by Kueue counts it; docs/queues.md). Only where no device "
        "plugin registers nvidia.com/gpu on the node.",
    )
    publish_interval_s: float = Field(10.0, gt=0, description="How often the slices are re-derived and published.")
    binding_interval_s: float = Field(1.0, gt=0, description="How often allocated claims are checked for binding.")
    metrics_port: int = Field(
        9403, ge=-1, le=65535, description="Prometheus port on 0.0.0.0; -1 disables, 0 picks one."
    )
