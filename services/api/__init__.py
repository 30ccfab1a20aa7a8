"""The tenant and admin REST API (FastAPI), its persistence and the submission worker.

The process is the top-level modules: ``cli`` (options) → ``main`` (entry) → ``app``
(wiring), the ``worker`` (durable queue → Kubernetes, pod watch), the adapter ``kube``
(Kubernetes), ``settings`` and ``errors``. The rest is one subpackage per kind of thing, each
on one floor, top-down (kept by an import-linter contract in pyproject.toml):

* ``routes/`` (HTTP endpoints and their request dependencies) beside ``console/`` (the web
  console's files);
* ``worker``;
* ``store/``: queries and writes, one module per job;
* ``usage/`` (GPU usage records, reports, budgets) and ``webhooks/`` (endpoints, outbox,
  delivery);
* ``edge/`` (ASGI middleware, rate and stream limits, slow clients) and ``security/``
  (bearer tokens, their cache and revocations, scopes);
* the adapters ``db/`` (engines, migrations, SQLite's writer, the submission pool, row
  claims) and ``kube``;
* ``errors``, ``settings`` and ``streams/`` (exec and log relays to the API server);
* ``domain/``: pure models, builders of Kubernetes objects and input rules.
"""
