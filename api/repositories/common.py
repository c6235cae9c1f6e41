"""Helpers every query module shares."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import (
    Select,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.orm import (
    Base,
)

R = TypeVar("R", bound=Base)


def insert_once(session: Session, row: R, existing: Select[R]) -> tuple[R, bool]:
    """Insert `row`, or return the row a concurrent writer inserted first (unique key clash).

    A savepoint keeps the clash from aborting the surrounding transaction.
    """
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
        return row, True
    except IntegrityError:
        found = session.scalars(existing).one_or_none()
        if found is None:
            raise
        return found, False
