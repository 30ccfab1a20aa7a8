"""The tenant and admin REST API (FastAPI), its persistence and the submission worker.

Layers, top-down (kept by an import-linter contract in pyproject.toml): ``cli`` → ``main``
(entry) → ``app`` (wiring) → ``routes/`` → ``deps``/``edge`` (dependencies, ASGI edge) →
``worker`` (durable queue → Kubernetes, pod watch) → ``store/`` (queries and writes) → adapters ``kube``
(Kubernetes) and ``db`` (engine, migrations) → pure ``models``, ``pods`` (builders),
``inventory``, ``security``, ``errors`` → ``validation``, ``settings``.
"""
