"""Fitted models prepared for the hot path, kept in memory: fits and price profile versions are
immutable rows."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from api import repositories as repo
from api.errors import NotFound
from ledger.nodes import shape_of_kind
from model import (
    FittedModel,
    Grid,
    MachineShape,
    Predictor,
    PriceProfile,
    ProfileBundle,
    host_grid,
    machine_of_host,
    paper_grid,
)
from model.verification import MAX_OBSERVATIONS, Observation
from store.orm import HostKind

GridName = Literal["paper", "host"]
PAPER_GRID = paper_grid()


@dataclass(frozen=True)
class Prepared:
    """A fitted model ready for the hot path, with what it needs of its bundle's host."""

    predictor: Predictor
    bundle_machine: MachineShape
    host_grid: Grid

    def machine(self, kind: HostKind | None) -> MachineShape:
        """The cluster's shape for the profile's host kind, else the bundle's own host."""
        return shape_of_kind(kind) if kind is not None else self.bundle_machine

    def grid(self, name: GridName) -> Grid:
        return self.host_grid if name == "host" else PAPER_GRID


class ModelCache:
    """Fitted models and price profile versions are immutable rows, so they are kept in memory,
    prepared, after the first use."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._models: OrderedDict[str, Prepared] = OrderedDict()
        self._prices: dict[str, PriceProfile] = {}
        self.prices_known_used: set[str] = set()
        self._runs: OrderedDict[tuple[str, int, str | None], tuple[Observation, ...]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def model(self, session: Session, fitted_id: str) -> Prepared:
        with self._lock:
            found = self._models.get(fitted_id)
            if found is not None:
                self._models.move_to_end(fitted_id)
                return found
        row = repo.get_fitted(session, fitted_id)
        if row is None:
            raise NotFound("fitted model", fitted_id)
        profile = repo.get_profile(session, row.profile_id)
        assert profile is not None  # a foreign key
        host = ProfileBundle.model_validate(profile.bundle).host
        prepared = Prepared(
            predictor=Predictor(FittedModel.model_validate(row.model)),
            bundle_machine=machine_of_host(host),
            host_grid=host_grid(host.llc_ways, host.min_llc_ways),
        )
        with self._lock:
            self._models[fitted_id] = prepared
            while len(self._models) > self._size:
                self._models.popitem(last=False)
        return prepared

    def price(self, session: Session, price_id: str) -> PriceProfile:
        found = self._prices.get(price_id)
        if found is None:
            row = repo.get_price_profile_by_id(session, price_id)
            if row is None:
                raise NotFound("price profile", price_id)
            found = self._prices[price_id] = PriceProfile.model_validate(row.body)
        return found

    def observations(
        self, session: Session, profile_id: str, count: int, newest: str | None
    ) -> tuple[Observation, ...]:
        """The verification runs a decision uses, read again only when the profile's count of
        runs or its newest run changed (most profiles have none: no read at all)."""
        if count == 0:
            return ()
        key = (profile_id, count, newest)
        with self._lock:
            found = self._runs.get(key)
        if found is not None:
            return found
        runs = tuple(
            Observation(
                slow_ratio=r.slow_ratio, llc_ways=r.llc_ways, seconds=r.seconds, run_id=r.run_id
            )
            for r in repo.verification_runs(session, profile_id, MAX_OBSERVATIONS)
        )
        with self._lock:
            self._runs[key] = runs
            while len(self._runs) > self._size:
                self._runs.popitem(last=False)
        return runs
