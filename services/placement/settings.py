"""Configuration of the scheduler extender: one pydantic-settings class, env prefix ``GPUCAAS_PLACEMENT_``."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PlacementSettings(BaseSettings):
    """Every knob of ``gpucaas scheduler-extender``; each field maps to ``GPUCAAS_PLACEMENT_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_PLACEMENT_", extra="ignore")

    host: str = Field("0.0.0.0", description="Address the extender's HTTP server binds to.")
    port: int = Field(8888, ge=0, le=65535, description="TCP port (0 = ephemeral).")
    kubeconfig: Path | None = Field(
        None,
        validation_alias=AliasChoices("GPUCAAS_PLACEMENT_KUBECONFIG", "GPUCAAS_KUBECONFIG"),
        description="kubeconfig file; unset = in-cluster config, else ~/.kube/config.",
    )
    gpu_resource: str = Field("nvidia.com/gpu", description="Extended resource name pods request GPUs by.")
    bind: bool = Field(
        True,
        description="Serve the bind verb: bind pods through the API and count them at once "
        "(closes the gap until the node reports the new partition).",
    )
    watch_timeout_seconds: int = Field(
        300, ge=1, description="Server-side timeout of one watch request before it is renewed."
    )
    kube_timeout_seconds: float = Field(10.0, gt=0, description="Timeout of one Kubernetes request.")
    partition_check: bool = Field(
        False,
        description="Answer Kueue's AdmissionCheck gpucaas-nvlink-partition: pass a Workload whose GPUs Kueue "
        "reserved only when a whole free NVLink partition of each of its pods' sizes exists for it, else "
        "queue it again (queueing=kueue; the tenancy controller's GPUCAAS_CONTROLLER_PARTITION_CHECK lists the "
        "check in every ClusterQueue; docs/queues.md).",
    )
    partition_check_lease_namespace: str = Field(
        "gpucaas-system",
        min_length=1,
        max_length=63,
        description="With partition_check: the namespace of the Lease gpucaas-partition-check, whose holder is "
        "the one replica that answers the check (the chart sets its release namespace).",
    )
    partition_promise_seconds: float = Field(
        120.0,
        gt=0,
        description="With partition_check: how long the GPUs of a Workload that passed stay counted as "
        "taken while none of its pods is bound (they are counted from the pods once bound).",
    )


@lru_cache
def get_settings() -> PlacementSettings:
    """The process-wide settings, read once from the environment."""
    return PlacementSettings()
