"""The API's domain, pure (no I/O): the tables and request/response shapes (``models``), the
Kubernetes objects it creates as wire dicts (``pods``, ``volumes``, ``endpoints``,
``tenant_secrets``), the rules of a tenant's input (``validation``, ``images``), a
container's size (``sizing``) and what a pod says back (``reasons``, ``events``), and the
admin's GPU inventory (``inventory``).

Every floor above may import these; they import nothing of the API's.
"""
