"""Bearer tokens: random, shown once, stored only as a SHA-256 digest.

Tokens carry 256 bits of randomness, so a fast unsalted digest is enough to make
a stolen table useless (no dictionary to try) while keeping lookup an index hit.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "gpc_"


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id(prefix: str = "", nbytes: int = 8) -> str:
    return prefix + secrets.token_hex(nbytes)
