"""Configuration of ``gpucaas kube-emulator``: one pydantic-settings class, env prefix ``GPUCAAS_KUBE_EMULATOR_``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of the emulator process; each field maps to ``GPUCAAS_KUBE_EMULATOR_<FIELD>``."""

    model_config = SettingsConfigDict(env_prefix="GPUCAAS_KUBE_EMULATOR_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address to bind (plain HTTP, development only: keep it local).")
    port: int = Field(6443, ge=0, le=65535, description="TCP port of plain HTTP (0 = ephemeral).")
    tls_port: int | None = Field(None, ge=0, le=65535,
                                 description="TCP port of HTTPS (0 = ephemeral; kubectl sends tokens over HTTPS only).")
    kubeconfig: Path | None = Field(None, description="Where to write a kubeconfig for the emulator.")
    persist: Path | None = Field(None, description="JSON file the objects are loaded from and saved to.")
    install_project_crds: bool = Field(True, description="Create the gpucaas CRDs at start.")
    event_history: int = Field(10000, ge=1, description="Watch events kept; older resourceVersions get 410 Gone.")
    bookmark_interval: float = Field(5.0, gt=0, description="Seconds between watch bookmarks (when asked for).")
    token_auth_file: Path | None = Field(
        None, description='Static tokens, kube-apiserver format: token,user,uid,"group1,group2" per line.')
    anonymous_auth: bool = Field(False, description="Requests without a token are system:anonymous (else 401).")
    audit_log: Path | None = Field(None, description="Append every authorisation decision to this file (JSON lines).")
    admin_token_file: Path | None = Field(
        None, description="Read the cluster-admin token from this file (else a random one, kept with --persist).")
    pod_graceful_deletion: bool = Field(
        False, description="Keep deleted pods bound to a node Terminating until deleted with grace 0 (kubelet-like)."
    )
