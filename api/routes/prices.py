"""Price profiles: versioned; a version is never changed, a new one is created instead."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from api.auth import Permission
from api.deps import SessionDep, require
from api.schemas import PriceProfileIn, PriceProfileOut
from api.services import prices as price_profiles
from store.orm import PriceProfileRow

router = APIRouter(prefix="/v1/price-profiles", tags=["price profiles"])
Admin = Annotated[object, Depends(require(Permission.admin))]
Reader = Annotated[object, Depends(require(Permission.read))]


def price_out(row: PriceProfileRow) -> PriceProfileOut:
    return PriceProfileOut(
        key=f"{row.name}@{row.version}",
        is_default=row.is_default,
        used=row.used,
        created_at=row.created_at,
        profile=row.body,
    )


@router.post("", status_code=201, response_model=PriceProfileOut, summary="Create a new version")
def create(body: PriceProfileIn, session: SessionDep, _: Admin) -> PriceProfileOut:
    return price_out(price_profiles.create_price_profile(session, body.model_dump()))


@router.get("", response_model=list[PriceProfileOut])
def list_all(session: SessionDep, _: Reader) -> list[PriceProfileOut]:
    return [price_out(r) for r in price_profiles.price_profiles(session)]


@router.get("/{key}", response_model=PriceProfileOut, summary="A profile by name@version")
def get(key: str, session: SessionDep, _: Reader) -> PriceProfileOut:
    return price_out(price_profiles.price_profile(session, key))


@router.post("/{key}/default", response_model=PriceProfileOut, summary="Make it the default")
def make_default(key: str, session: SessionDep, _: Admin) -> PriceProfileOut:
    return price_out(price_profiles.make_default(session, key))
