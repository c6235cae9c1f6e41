"""Fitted models prepared for the hot path, kept in memory: fits and price profile versions are
immutable rows."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.orm import Session

from api import repositories as repo
from api.errors import NotFound
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
from model.memo import Recent
from model.recommend import Shortlist
from model.verification import MAX_OBSERVATIONS, Observation

GridName = Literal["paper", "host"]
PAPER_GRID = paper_grid()


@dataclass(frozen=True)
class Prepared:
    """A fitted model ready for the hot path, with what it needs of its bundle's host."""

    predictor: Predictor
    bundle_machine: MachineShape
    host_grid: Grid

    def machine(self, kind: MachineShape | None) -> MachineShape:
        """The cluster's shape for the profile's host kind, else the bundle's own host."""
        return kind if kind is not None else self.bundle_machine

    def grid(self, name: GridName) -> Grid:
        return self.host_grid if name == "host" else PAPER_GRID


@dataclass
class _Seen:
    id: str
    created_at: datetime
    seen_at: float  # time.monotonic() when it was read or stored
    written_at: float  # when its count was last written
    pending: int = 0  # repeats committed since, not yet written


class DecisionMemo:
    """The decisions this process stored or found, by decision key, for a minute: a repeat of
    one is counted without a read, and its count is written at most every `write_every` seconds
    (one UPDATE of its row, not one per request: a burst of identical decisions would queue on
    the row's lock). A process that dies loses at most that many seconds of counts."""

    def __init__(self, ttl_seconds: float = 60.0, write_every: float = 10.0, size: int = 4096):
        self.ttl_seconds = ttl_seconds
        self.write_every = write_every
        self._size = size
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, key: str) -> tuple[str, datetime] | None:
        now = time.monotonic()
        with self._lock:
            found = self._seen.get(key)
            if found is None:
                return None
            if now - found.seen_at > self.ttl_seconds:
                del self._seen[key]
                return None
            return found.id, found.created_at

    def remember(self, key: str, rec_id: str, created_at: datetime, written: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self._seen[key] = _Seen(rec_id, created_at, now, now if written else 0.0)
            self._seen.move_to_end(key)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)

    def due(self, key: str) -> int:
        """How many repeats to write now, this one included; 0 when it is not yet time."""
        with self._lock:
            found = self._seen.get(key)
            if found is None or time.monotonic() - found.written_at < self.write_every:
                return 0
            return found.pending + 1

    def counted(self, key: str, written: int) -> None:
        """After the commit of one more repeat, of which `written` repeats were written."""
        with self._lock:
            found = self._seen.get(key)
            if found is None:
                return
            found.pending = found.pending + 1 - written
            if written:
                found.written_at = time.monotonic()


class ModelCache:
    """Fitted models and price profile versions are immutable rows, so they are kept in memory,
    prepared, after the first use.

    `results` keeps Algorithm 1's answers by their complete inputs. A decision is a pure function
    of the fit, the machine, the grid, the verification runs, the prices, the live utilization,
    the objective and the threshold; every one of these is in the key, so a hit is the answer
    the model would give again. Pods of one workload asking within one utilization snapshot (a
    scale-out, the publisher's refresh) ask the same question many times.

    `shortlists` keeps, by the same inputs but the utilization, what the model computes before
    the utilization matters (model.recommend.Shortlist): the same question under another
    utilization runs only Algorithm 1's second round."""

    def __init__(self, size: int = 512, answers: int = 256, shortlists: int = 256) -> None:
        self._models: Recent[str, Prepared] = Recent(size)
        self._prices: dict[str, PriceProfile] = {}
        self.prices_known_used: set[str] = set()
        self._runs: Recent[tuple[str, int, str | None], tuple[Observation, ...]] = Recent(size)
        self.decisions = DecisionMemo()
        self.results: Recent[Hashable, Any] = Recent(answers)
        self.shortlists: Recent[Hashable, Shortlist] = Recent(shortlists)

    def model(self, session: Session, fitted_id: str) -> Prepared:
        return self._models.get_or_compute(fitted_id, lambda: self._prepare(session, fitted_id))

    def _prepare(self, session: Session, fitted_id: str) -> Prepared:
        row = repo.get_fitted(session, fitted_id)
        if row is None:
            raise NotFound("fitted model", fitted_id)
        profile = repo.get_profile(session, row.profile_id)
        assert profile is not None  # a foreign key
        host = ProfileBundle.model_validate(profile.bundle).host
        return Prepared(
            predictor=Predictor(FittedModel.model_validate(row.model)),
            bundle_machine=machine_of_host(host),
            host_grid=host_grid(host.llc_ways, host.min_llc_ways),
        )

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
        return self._runs.get_or_compute(
            (profile_id, count, newest),
            lambda: tuple(
                Observation(
                    slow_ratio=r.slow_ratio,
                    llc_ways=r.llc_ways,
                    seconds=r.seconds,
                    run_id=r.run_id,
                )
                for r in repo.verification_runs(session, profile_id, MAX_OBSERVATIONS)
            ),
        )
