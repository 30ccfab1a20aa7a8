"""HTTP clients of `caasctl`: the API's admin endpoints (HTTPS) and a node's fabric socket.

caasctl is a REST client only: it never imports the database or Kubernetes
adapters. Errors come back as ``CaasctlError`` with the server's one-line detail.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

CONFIG_ENV = "GPUCAAS_CONFIG"
DEFAULT_CONFIG = Path("~/.config/gpucaas/config.yaml")


class CaasctlError(Exception):
    """A failure to report on one line (exit code 1)."""


@dataclass
class Config:
    """Where to reach the API, resolved flag > environment > config file."""

    url: str | None = None
    token: str | None = None
    ca_cert: str | None = None
    insecure: bool = False
    fabric_sockets: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(cls, *, url: str | None, token: str | None, ca_cert: str | None, insecure: bool,
                config_path: str | None) -> Config:
        path = Path(config_path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).expanduser()
        data: dict[str, Any] = {}
        if path.exists():
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise CaasctlError(f"config file {path} is not valid YAML: {getattr(exc, 'problem', None) or exc}{where}") from exc
            if not isinstance(data, dict):
                raise CaasctlError(f"config file {path} must be a mapping with url, token, ca_cert")
        elif config_path:
            raise CaasctlError(f"config file {path} does not exist")
        nodes = data.get("nodes") or {}
        if not isinstance(nodes, dict):
            raise CaasctlError(f"config file {path}: nodes must be a mapping of node name to {{fabric_socket: path}}")
        return cls(
            url=url or os.environ.get("GPUCAAS_URL") or data.get("url"),
            token=token or os.environ.get("GPUCAAS_TOKEN") or data.get("token"),
            ca_cert=ca_cert or os.environ.get("GPUCAAS_CA_CERT") or data.get("ca_cert"),
            insecure=insecure or bool(data.get("insecure", False)),
            fabric_sockets={n: str(v.get("fabric_socket")) for n, v in nodes.items()
                            if isinstance(v, dict) and v.get("fabric_socket")},
        )


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason_phrase
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, list):  # FastAPI validation errors
            return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg')}" for e in detail)
        if detail:
            return str(detail)
    return str(body)[:300]


class RestClient:
    """The gpucaas REST API over HTTPS (httpx): caasctl's only client; no Kubernetes access."""

    def __init__(self, cfg: Config, timeout: float = 30.0) -> None:
        if not cfg.url:
            raise CaasctlError("no API URL: pass --url, set GPUCAAS_URL, or put url: in ~/.config/gpucaas/config.yaml")
        if not cfg.token:
            raise CaasctlError("no token: pass --token, set GPUCAAS_TOKEN, or put token: in the config file")
        verify: bool | ssl.SSLContext = True
        if cfg.insecure:
            verify = False
        elif cfg.ca_cert:
            try:
                verify = ssl.create_default_context(cafile=cfg.ca_cert)
            except (OSError, ssl.SSLError) as exc:
                raise CaasctlError(f"CA certificate {cfg.ca_cert} cannot be loaded: {exc}") from exc
        self.http = httpx.Client(base_url=cfg.url.rstrip("/"), timeout=timeout, verify=verify,
                                 headers={"Authorization": f"Bearer {cfg.token}"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CaasctlError(f"cannot reach the API at {self.http.base_url}: {exc}") from exc
        if resp.status_code >= 400:
            raise CaasctlError(f"{resp.status_code}: {_detail(resp)}")
        return resp.json() if resp.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body if body is not None else {})

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def stream_lines(self, path: str, **params: Any) -> Iterator[str]:
        try:
            with self.http.stream("GET", path, params=params, timeout=None) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise CaasctlError(f"{resp.status_code}: {_detail(resp)}")
                yield from resp.iter_lines()
        except httpx.HTTPError as exc:
            raise CaasctlError(f"log stream broke: {exc}") from exc


def fabric_socket_for(cfg: Config, node: str | None, explicit: str | None) -> str:
    """The node's fabric socket: --fabric-socket, the config's nodes.<node>.fabric_socket, or the local default."""
    if explicit:
        return explicit
    if node and node in cfg.fabric_sockets:
        return cfg.fabric_sockets[node]
    local = os.environ.get("GPUCAAS_FABRIC_SOCKET", "/run/gpucaas/fabric.sock")
    if Path(local).exists():
        return local
    where = f" for node {node}" if node else ""
    raise CaasctlError(
        f"no fabric service socket{where}: run caasctl on the node, pass --fabric-socket, "
        "or add nodes.<node>.fabric_socket to the config file")
