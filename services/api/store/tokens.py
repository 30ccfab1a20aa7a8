"""API tokens: mint, look up (by digest), record their use at most once a minute, list and
revoke them. A revocation holds on every replica when :func:`delete_token` returns
(``services.api.security.revocations``). Callers own the session."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, select

from services.api.domain.models import ApiToken, AuditAction
from services.api.security import bearer, revocations, token_cache
from services.api.store import audit
from services.api.store.audit import Actor


def create_token(
    session: Session,
    *,
    tenancy: str | None,
    name: str | None = None,
    scope: str | None = None,
    expires_at: datetime | None = None,
    actor: Actor | None = None,
) -> tuple[ApiToken, str]:
    """A new token for ``tenancy`` (None = admin); returns the row and the secret (shown
    once, never stored: the row holds its digest). ``actor``, the token minting it, is
    recorded as ``created_by`` and in the tenancy's audit trail, in the same commit."""
    secret = bearer.generate_token()
    row = ApiToken(
        id=bearer.new_id("tok_"),
        tenancy=tenancy,
        token_hash=bearer.hash_token(secret),
        name=name,
        scope=scope,
        expires_at=expires_at,
        created_by=actor.token_id if actor else None,
    )
    session.add(row)
    if tenancy is not None:
        detail = f"name {name!r}, scope {scope or 'admin'}" + (
            f", expires {expires_at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}" if expires_at else ""
        )
        audit.record(session, actor, tenancy=tenancy, action=AuditAction.TOKEN_CREATE, target=row.id, detail=detail)
    session.commit()
    session.refresh(row)
    return row, secret


def ensure_admin_token(session: Session, *, secret: str, name: str = "bootstrap") -> ApiToken:
    """Make sure the configured admin token is accepted (idempotent across restarts)."""
    digest = bearer.hash_token(secret)
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if row is not None:
        return row
    row = ApiToken(id=bearer.new_id("tok_"), tenancy=None, token_hash=digest, name=name)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # another replica inserted it
        session.rollback()
        row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).one()
    return row


def count_admin_tokens(session: Session) -> int:
    return int(session.exec(select(func.count()).select_from(ApiToken).where(col(ApiToken.tenancy).is_(None))).one())


def token_by_secret(session: Session, *, secret: str) -> ApiToken | None:
    return token_by_digest(session, digest=bearer.hash_token(secret))


def token_by_digest(session: Session, *, digest: str) -> ApiToken | None:
    """The token whose SHA-256 digest this is (an index hit: ``token_hash`` is unique)."""
    return session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()


TOUCH_EVERY = timedelta(minutes=1)


def touch_due(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether the token's use should be recorded now (at most once a minute)."""
    last = last_used_at
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=now.tzinfo)
    return last is None or now - last >= TOUCH_EVERY


def touch_token(session: Session, *, token_id: str, now: datetime) -> None:
    """Record the token's use (callers check :func:`touch_due` first: no write on most requests)."""
    session.exec(update(ApiToken).where(col(ApiToken.id) == token_id).values(last_used_at=now))
    session.commit()


def list_tokens(session: Session, *, tenancy: str) -> Sequence[ApiToken]:
    return session.exec(select(ApiToken).where(ApiToken.tenancy == tenancy).order_by(col(ApiToken.created_at))).all()


def count_tokens(session: Session, *, tenancy: str) -> int:
    return int(session.exec(select(func.count()).select_from(ApiToken).where(ApiToken.tenancy == tenancy)).one())


def delete_token(session: Session, *, tenancy: str, token_id: str, actor: Actor | None = None) -> bool:
    """Revoke one of the tenancy's tokens (False: no such token in that tenancy). When this
    returns, no replica accepts it any more: this process forgets it after the commit and
    every other replica has acknowledged the revocation (``services.api.security.revocations``)."""
    name = session.exec(
        select(ApiToken.name).where(col(ApiToken.tenancy) == tenancy, col(ApiToken.id) == token_id)
    ).first()
    result = session.exec(delete(ApiToken).where(col(ApiToken.tenancy) == tenancy, col(ApiToken.id) == token_id))
    epoch = None
    if result.rowcount:
        epoch = revocations.announce(session, token_id=token_id)
        audit.record(
            session,
            actor,
            tenancy=tenancy,
            action=AuditAction.TOKEN_REVOKE,
            target=token_id,
            detail=f"name {name!r}" if name else None,
        )
    session.commit()
    token_cache.revoked(token_id=token_id)
    revocations.wait_heard(session.get_bind(), epoch)  # type: ignore[arg-type]
    return bool(result.rowcount)
