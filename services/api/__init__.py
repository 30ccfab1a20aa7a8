"""The tenant and admin REST API (FastAPI), its persistence and the submission worker.

Layers, bottom-up: ``settings``/``errors`` → pure domain (``validation``, ``pods``,
``security``) → adapters (``db`` for SQL, ``kube`` for Kubernetes) → ``crud`` →
``worker`` (durable queue → Kubernetes) and the transport (``routes/``, ``deps``,
``app``) → the entry module ``main`` and the CLI ``cli``.
"""
