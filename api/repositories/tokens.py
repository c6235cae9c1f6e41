"""API tokens, by their hash."""

from __future__ import annotations

from sqlalchemy import (
    select,
)
from sqlalchemy.orm import Session

from store.orm import (
    ApiToken,
)


def find_token(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(
        select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None))
    ).one_or_none()
