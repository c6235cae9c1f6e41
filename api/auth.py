"""Bearer tokens with roles. Tokens are random; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    agent = "agent"  # uploads profiles
    scheduler = "scheduler"  # asks for recommendations, drives the ledger
    operator = "operator"  # everything
    viewer = "viewer"  # reads


class Permission(StrEnum):
    read = "read"
    upload = "upload"
    recommend = "recommend"
    schedule = "schedule"
    admin = "admin"


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.agent: frozenset({Permission.upload}),
    Role.scheduler: frozenset({Permission.read, Permission.recommend, Permission.schedule}),
    Role.operator: frozenset(Permission),
    Role.viewer: frozenset({Permission.read}),
}


@dataclass(frozen=True)
class Caller:
    """Who presented a token: its role, and the node an agent's token speaks for (None: any)."""

    role: Role
    node: str | None = None


TOKEN_PREFIX = "tmc_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    # A token has 256 bits of entropy, so a fast hash cannot be brute-forced; no salt needed.
    return hashlib.sha256(token.encode()).hexdigest()
