"""Keyset page cursors: ``?after=<cursor>`` continues a listing right after the last row
of the previous page, whose response gave the cursor as ``next``.

A cursor is the last row's sort key (``created_at``, ``id``) in URL-safe base64, opaque to
clients (they pass back what they got). Unlike ``offset``, a cursor costs the same on the
thousandth page as on the first and neither skips nor repeats rows when new ones arrive
between pages (the approach of the Kubernetes API's ``continue`` token and of GitHub's and
Stripe's ``after`` cursors; see https://use-the-index-luke.com/no-offset).
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime

from services.api import errors

_FIX = "pass back the 'next' value of the previous page unchanged"


def encode(key: tuple[datetime, str]) -> str:
    created, row_id = key
    if created.tzinfo is None:  # SQLite hands back naive UTC
        created = created.replace(tzinfo=UTC)
    raw = f"{created.astimezone(UTC).isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str]:
    """The sort key in ``cursor``; 400 naming ``after`` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, row_id = raw.split("|", 1)
        created = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise errors.Invalid(f"after: not a page cursor; {_FIX}") from exc
    if created.tzinfo is None or not row_id or len(row_id) > 64:
        raise errors.Invalid(f"after: not a page cursor; {_FIX}")
    return created, row_id
