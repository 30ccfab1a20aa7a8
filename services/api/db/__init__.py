"""The database adapter: engines and schema migration (``engines``, Alembic scripts in
``../migrations``), SQLite's one writer at a time (``sqlite_writer``), the submission's
psycopg pool on PostgreSQL (``admission_pool``) and claiming due rows of an outbox
(``row_claims``).

The queries of each job live above, in ``store/``, ``usage/`` and ``webhooks/``.
"""
