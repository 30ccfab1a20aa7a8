"""The signature scheme of webhook deliveries (modelled on Stripe's, see the package docstring).

Each POST carries:

* ``Gpucaas-Webhook-Id``: the event's id (the same on every retry: deduplicate on it);
* ``Gpucaas-Webhook-Timestamp``: the attempt's time, whole seconds since the epoch;
* ``Gpucaas-Webhook-Signature``: ``v1=<hex>``, the HMAC-SHA256 of
  ``timestamp + "." + body`` keyed with the endpoint's secret (the whole ``whsec_...``
  string, as UTF-8). Several space-separated ``v1=`` values may appear (a future secret
  rotation); one matching is enough.

``verify`` below is the recipe of docs/webhooks.md; it uses the standard library only so
a tenant can copy it as it is.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER_ID = "Gpucaas-Webhook-Id"
HEADER_TIMESTAMP = "Gpucaas-Webhook-Timestamp"
HEADER_SIGNATURE = "Gpucaas-Webhook-Signature"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Gpucaas-Webhook-Signature`` value for one attempt."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def headers(secret: str, event_id: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        "Content-Type": "application/json",
        HEADER_ID: event_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: sign(secret, timestamp, body),
    }


# --- the verification recipe (docs/webhooks.md shows this function) ---------------
# BEGIN verify
def verify(secret: str, headers: dict, body: bytes, tolerance: int = 300, now: float | None = None) -> bool:
    """True when a gpucaas webhook request is authentic and fresh.

    secret: the endpoint's signing secret (whsec_...); headers: the request's headers
    (any case); body: the raw request body, before any JSON parsing; tolerance: the
    replay window in seconds (5 minutes)."""
    import hashlib
    import hmac
    import time

    lower = {k.lower(): v for k, v in headers.items()}
    timestamp = lower.get("gpucaas-webhook-timestamp", "")
    signatures = lower.get("gpucaas-webhook-signature", "")
    if not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False  # too old (or from the future): a replay
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(part.startswith("v1=") and hmac.compare_digest(part[3:], expected) for part in signatures.split())


# END verify
