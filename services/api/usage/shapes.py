"""Response shapes of the usage endpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class UsageDay(BaseModel):
    day: str = Field(description="UTC calendar day (YYYY-MM-DD).", examples=["2026-11-22"])
    tenancy: str
    gpu_seconds: float = Field(description="GPUs × seconds used on that day within the window.")
    gpu_hours: float
    containers: int = Field(description="Containers that used GPUs on that day (several runs of one count once).")


class UsageContainer(BaseModel):
    container_id: str
    attempt: int = Field(
        description="Which run of the container: 1, or n + 1 after n preemptions that put it back in the queue."
    )
    tenancy: str
    gpus: int
    gpu_model: str | None = Field(description="The node's nvidia.com/gpu.product label, when it has one.")
    node_name: str | None
    nvlink_partition_size: int | None = Field(description="GPUs in its NVLink partition; null: none.")
    interruptible: bool = Field(description="The run's class: true for interruptible, false for standard.")
    started_at: str = Field(description="The container's own start (the pod's state.running.startedAt).")
    finished_at: str | None = Field(description="The container's own end; null while it runs.")
    running: bool
    end_source: Literal["pod", "deleted", "vanished"] | None = Field(
        description="pod: the container's finishedAt; deleted: its pod was deleted first (cancelled), ended then; "
        "vanished: its pod was gone when the API looked again, ended then."
    )
    gpu_seconds: float = Field(description="GPUs × seconds within the window (a running one: up to now).")
    gpu_hours: float


class UsageReport(BaseModel):
    from_: str = Field(alias="from", description="Window start (inclusive, UTC).")
    to: str = Field(description="Window end (exclusive, UTC).")
    group_by: Literal["day", "container"]
    tenancy: str | None = Field(description="Whose usage; null: every tenancy (admin).")
    total_gpu_seconds: float
    total_gpu_hours: float
    data: list[UsageDay] | list[UsageContainer]
    count: int
