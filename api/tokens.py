"""The API tokens' store: mint, list and revoke. Only a token's SHA-256 is kept, so a token is
shown once, when it is minted; listing shows names, roles and ids, never a token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.auth import Role, new_token, token_hash
from store.orm import ApiToken, utcnow


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None
    node: str | None = None


class TokenNotFound(LookupError):
    pass


class AmbiguousToken(LookupError):
    pass


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(row.id, row.name, row.role, row.created_at, row.revoked_at, row.node)


def mint(session: Session, role: Role, name: str, node: str | None = None) -> tuple[TokenInfo, str]:
    """A new token: its row (hash only) and the token itself, to be shown once. `node`: an agent
    token that speaks for that node only."""
    if node is not None and role is not Role.agent:
        raise ValueError("only an agent token speaks for a node")
    token = new_token()
    row = ApiToken(name=name, role=role.value, token_hash=token_hash(token), node=node)
    session.add(row)
    session.flush()
    return _info(row), token


def list_tokens(session: Session, *, include_revoked: bool) -> Sequence[TokenInfo]:
    query = select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return [_info(row) for row in session.scalars(query)]


def revoke(session: Session, name_or_id: str) -> TokenInfo:
    """Revoke the one live token with this id, or else with this name. A name that several live
    tokens share is refused: the caller names the one it means by id."""
    live = session.scalars(
        select(ApiToken)
        .where(
            ApiToken.revoked_at.is_(None),
            or_(ApiToken.id == name_or_id, ApiToken.name == name_or_id),
        )
        .with_for_update()
    ).all()
    by_id = [row for row in live if row.id == name_or_id]
    matches = by_id or live
    if not matches:
        raise TokenNotFound(name_or_id)
    if len(matches) > 1:
        raise AmbiguousToken(name_or_id)
    row = matches[0]
    row.revoked_at = utcnow()
    session.flush()
    return _info(row)
