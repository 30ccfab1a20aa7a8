"""The API's queries and writes, one keyword-only function each; callers own the session.

One module per job: ``tenancies``, ``tokens``, ``admission`` (container submission),
``containers`` (the readers' queries and cancellation), ``worker_state`` (the worker's
claims and state transitions); ``dialect`` says which database a session talks to.
"""
