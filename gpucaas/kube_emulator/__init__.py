"""A Kubernetes API emulator for development and tests (never production).

It serves the Kubernetes REST API over real HTTP from memory (optionally persisted to a
file), so the official ``kubernetes`` client and Kopf run unchanged against it. Layers:
``errors`` (Status objects) → ``resources`` (kinds, discovery) → ``selectors``,
``patching``, ``validation`` (pure) → ``store`` (API semantics) → ``app`` (aiohttp
transport) → ``server`` (lifecycle, kubeconfig, persistence) → ``cli``.
"""

from __future__ import annotations

from gpucaas.kube_emulator.server import KubeEmulator, kubeconfig_dict

__all__ = ["KubeEmulator", "kubeconfig_dict"]
