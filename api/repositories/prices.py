"""Price profiles: the default, by name and version, and their use."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from api.repositories.common import insert_once
from store.orm import (
    PriceProfileRow,
)


def default_price_profile(session: Session) -> PriceProfileRow | None:
    return session.scalars(
        select(PriceProfileRow).where(PriceProfileRow.is_default.is_(True))
    ).one_or_none()


def get_price_profile(session: Session, name: str, version: int) -> PriceProfileRow | None:
    return session.scalars(
        select(PriceProfileRow).where(
            PriceProfileRow.name == name, PriceProfileRow.version == version
        )
    ).one_or_none()


def latest_price_profile_version(session: Session, name: str) -> int:
    found = session.scalar(
        select(func.max(PriceProfileRow.version)).where(PriceProfileRow.name == name)
    )
    return int(found or 0)


def list_price_profiles(session: Session) -> Sequence[PriceProfileRow]:
    return session.scalars(
        select(PriceProfileRow).order_by(PriceProfileRow.name, PriceProfileRow.version)
    ).all()


def insert_price_profile(session: Session, row: PriceProfileRow) -> tuple[PriceProfileRow, bool]:
    return insert_once(
        session,
        row,
        select(PriceProfileRow).where(
            PriceProfileRow.name == row.name, PriceProfileRow.version == row.version
        ),
    )


def make_default_price_profile(session: Session, row: PriceProfileRow) -> None:
    """Exactly one default, whatever runs concurrently: every price profile row is locked first,
    always in the same order (so two callers queue instead of deadlocking), then one statement
    sets the flag on `row` and clears it everywhere else. The later caller wins, whole."""
    session.execute(select(PriceProfileRow.id).order_by(PriceProfileRow.id).with_for_update()).all()
    session.execute(
        update(PriceProfileRow)
        .values(is_default=PriceProfileRow.id == row.id)
        .execution_options(synchronize_session=False)
    )
    session.refresh(row)


def mark_price_profile_used(session: Session, profile_id: str) -> None:
    session.execute(
        update(PriceProfileRow)
        .where(PriceProfileRow.id == profile_id, PriceProfileRow.used.is_(False))
        .values(used=True)
    )


def get_price_profile_by_id(session: Session, price_id: str) -> PriceProfileRow | None:
    return session.get(PriceProfileRow, price_id)
