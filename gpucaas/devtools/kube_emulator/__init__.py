"""A Kubernetes API emulator for development and tests (never production).

It serves the Kubernetes REST API over real HTTP from memory (optionally persisted to a
file), so the official ``kubernetes`` client and Kopf run unchanged against it. Layers:
``errors`` (Status objects) → ``resources`` (kinds, discovery) → ``selectors``,
``patching``, ``validation`` (pure) → ``store`` (API semantics) → ``app`` (aiohttp
transport) → ``server`` (lifecycle, kubeconfig, persistence) → ``cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucaas.devtools.kube_emulator.server import KubeEmulator, kubeconfig_dict

__all__ = ["KubeEmulator", "kubeconfig_dict"]


def __getattr__(name: str) -> Any:
    # Lazy, so that ``gpucaas --help`` does not import aiohttp through the CLI registration.
    if name in __all__:
        from gpucaas.devtools.kube_emulator import server

        return getattr(server, name)
    raise AttributeError(name)
