"""The API's queries and writes, one keyword-only function each; callers own the session.

One module per job: ``tenancies``, ``tokens``, ``admission`` (container submission),
``containers`` (the readers' queries and cancellation), ``worker_state`` (the worker's
claims and state transitions), ``log_archive`` (the kept tail of a container's log),
``audit`` (the audit trail's rows); ``retention`` prunes what has outlived its days, in
batches of its own on an engine, with the pods of pruned containers. ``dialect`` says
which database a session talks to.
"""
