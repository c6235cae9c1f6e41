"""What the caller optimises for. Each objective says which candidates are acceptable and how
they rank; Algorithm 1's threshold T then widens the choice around the best."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.errors import InvalidRequest

ObjectiveKind = Literal["cheapest", "slo", "least_dram"]


class Objective(BaseModel):
    """cheapest: least cost (Eq. 1). slo: least cost among those at most `max_slowdown` slower
    than fastmax (paper §2.1). least_dram: least DRAM among those losing at most `max_slowdown`
    against fastmax (Tuna's question), cost breaking ties."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    kind: ObjectiveKind = "cheapest"
    max_slowdown: float | None = Field(default=None, ge=0.0, le=100.0)

    @model_validator(mode="after")
    def _bound_needed(self) -> Objective:
        if self.kind == "cheapest" and self.max_slowdown is not None:
            raise ValueError("cheapest takes no slowdown bound")
        if self.kind != "cheapest" and self.max_slowdown is None:
            raise ValueError(f"{self.kind} needs max_slowdown")
        return self

    def __str__(self) -> str:
        if self.max_slowdown is None:
            return self.kind
        return f"{self.kind.replace('_', '-')}:{self.max_slowdown * 100:g}%"


CHEAPEST = Objective()

_SPEC = re.compile(r"^(cheapest|slo|least-dram|least_dram)(?::([0-9]*\.?[0-9]+)(%?))?$")


def parse_objective(spec: str) -> Objective:
    """`cheapest`, `slo:5%`, `least-dram:10%` (a bare number is a fraction: `slo:0.05`)."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise InvalidRequest("objective", f"{spec!r} is not cheapest, slo:X% or least-dram:X%")
    kind, number, percent = m.groups()
    kind = kind.replace("-", "_")
    if kind == "cheapest":
        if number is not None:
            raise InvalidRequest("objective", "cheapest takes no bound")
        return CHEAPEST
    if number is None:
        raise InvalidRequest("objective", f"{kind} needs a slowdown bound, e.g. {kind}:5%")
    bound = float(number) / (100.0 if percent else 1.0)
    if not 0.0 <= bound <= 100.0:
        raise InvalidRequest("objective", "the slowdown bound lies between 0% and 10000%")
    return Objective(kind=kind, max_slowdown=bound)
