"""Price profiles: named, versioned, immutable once created; one of them is the default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from api import repositories as repo
from api.errors import Conflict, InvalidInput, NotFound
from model import DEFAULT_PRICE_PROFILE, PriceProfile
from store.orm import PriceProfileRow


def parse_price_key(key: str) -> tuple[str, int]:
    name, sep, version = key.partition("@")
    if not sep or not version.isdigit():
        raise InvalidInput(f"price profile {key!r} is not name@version")
    return name, int(version)


def resolve_price_profile(
    session: Session, key: str | None
) -> tuple[PriceProfileRow, PriceProfile]:
    if key is None:
        row = repo.default_price_profile(session) or ensure_default_price_profile(session)
    else:
        name, version = parse_price_key(key)
        found = repo.get_price_profile(session, name, version)
        if found is None:
            raise NotFound("price profile", key)
        row = found
    return row, PriceProfile.model_validate(row.body)


def ensure_default_price_profile(session: Session) -> PriceProfileRow:
    """The paper's method as the built-in default, created once."""
    builtin = DEFAULT_PRICE_PROFILE
    row, _ = repo.insert_price_profile(
        session,
        PriceProfileRow(
            name=builtin.name,
            version=builtin.version,
            body=builtin.model_dump(mode="json"),
            is_default=repo.default_price_profile(session) is None,
        ),
    )
    return row


def create_price_profile(session: Session, body: dict[str, Any]) -> PriceProfileRow:
    """A new version of a named profile; the version number is assigned here."""
    name = str(body.get("name", ""))
    version = repo.latest_price_profile_version(session, name) + 1
    profile = PriceProfile.model_validate({**body, "version": version})
    row, created = repo.insert_price_profile(
        session,
        PriceProfileRow(name=profile.name, version=version, body=profile.model_dump(mode="json")),
    )
    if not created:
        raise Conflict(f"price profile {profile.key} was created concurrently; retry")
    return row


def make_default(session: Session, key: str) -> PriceProfileRow:
    name, version = parse_price_key(key)
    row = repo.get_price_profile(session, name, version)
    if row is None:
        raise NotFound("price profile", key)
    repo.make_default_price_profile(session, row)
    return row


def price_profiles(session: Session) -> Sequence[PriceProfileRow]:
    """Every stored price profile."""
    return repo.list_price_profiles(session)


def price_profile(session: Session, key: str) -> PriceProfileRow:
    """The price profile `name@version`; NotFound otherwise."""
    name, version = parse_price_key(key)
    row = repo.get_price_profile(session, name, version)
    if row is None:
        raise NotFound("price profile", key)
    return row
