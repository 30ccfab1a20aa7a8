"""What a tenant token's scope lets it do (pure), decided from the request's method and path.

* ``read``: look only (GET/HEAD): containers, their logs and events, secret names.
* ``submit``: also submit and cancel containers, create and delete volumes, and run
  commands in containers (``exec``: a WebSocket whose upgrade is a GET, yet it changes
  the container).
* ``admin``: also manage the tenancy's secrets, registry credentials, webhooks and
  tokens (``/v1/tokens``), and read its audit trail (``/v1/audit``): those two need
  ``admin`` even to look — a token listing tells who holds access, the trail tells who
  did what from where.

Admin tokens (bound to no tenancy) carry ``admin`` and the admin endpoints check them
apart. Deciding here from method and path keeps the rule in one place, and any new
write endpoint is refused to ``read`` tokens by default.
"""

from __future__ import annotations

READ, SUBMIT, ADMIN = "read", "submit", "admin"
SCOPES = (READ, SUBMIT, ADMIN)
_RANK = {READ: 0, SUBMIT: 1, ADMIN: 2}
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_SUBMIT_PREFIXES = ("/v1/containers", "/v1/volumes")
_ADMIN_PREFIXES = ("/v1/tokens", "/v1/audit")  # admin even to look
_EXEC_SUFFIX = "/exec"  # /v1/containers/{id}/exec: submit whatever the method


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def needed(method: str, path: str) -> str:
    """The least scope a request needs."""
    if _under(path, _ADMIN_PREFIXES):
        return ADMIN
    if _under(path, _SUBMIT_PREFIXES) and path.endswith(_EXEC_SUFFIX):
        return SUBMIT
    if method.upper() in _SAFE:
        return READ
    if _under(path, _SUBMIT_PREFIXES):
        return SUBMIT
    return ADMIN


def allows(scope: str | None, method: str, path: str) -> bool:
    have = _RANK.get(scope or ADMIN, -1)
    return have >= _RANK[needed(method, path)]


def within(wanted: str, have: str | None) -> bool:
    """Whether a token of scope ``have`` (None: admin) may mint one of scope ``wanted``:
    no wider than its own."""
    return _RANK[wanted] <= _RANK.get(have or ADMIN, -1)
