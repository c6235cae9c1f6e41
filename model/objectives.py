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
        # Fixed-point, so that what is printed parses back (`:g` would write 1e-06%).
        percent = f"{self.max_slowdown * 100:.6f}".rstrip("0").rstrip(".")
        return f"{self.kind.replace('_', '-')}:{percent}%"


CHEAPEST = Objective()

# Algorithm 1's threshold T (paper §3.5): candidates within this share of the best score are
# ranked by packing penalty. The one definition every caller's default comes from.
DEFAULT_THRESHOLD = 0.025

# A bounded number: at most 5 digits before and 6 after the point (the bound is at most 10000 %).
_NUMBER = r"[0-9]{1,5}(?:\.[0-9]{1,6})?"
_STRICT = re.compile(rf"^(cheapest|slo|least-dram|least_dram)(?::({_NUMBER})%)?$")
_LOOSE = re.compile(r"^(slo|least-dram|least_dram):(.*)$")


def parse_objective(spec: str) -> Objective:
    """`cheapest`, `slo:5%` or `least-dram:10%`. The bound is always a percentage with its `%`:
    a bare `slo:5` could mean 5 % or 500 %, so it is rejected with the form to write instead."""
    text = spec.strip()
    m = _STRICT.match(text)
    if not m:
        raise InvalidRequest("objective", _why_not(text))
    kind, number = m.groups()
    kind = kind.replace("-", "_")
    if kind == "cheapest":
        if number is not None:
            raise InvalidRequest("objective", "cheapest takes no bound: write cheapest")
        return CHEAPEST
    if number is None:
        example = kind.replace("_", "-")
        raise InvalidRequest("objective", f"{kind} needs a slowdown bound, e.g. {example}:5%")
    bound = float(number) / 100.0
    if bound > 100.0:
        raise InvalidRequest("objective", "the slowdown bound lies between 0% and 10000%")
    return Objective(kind=kind, max_slowdown=bound)


def _why_not(text: str) -> str:
    shown = text if len(text) <= 40 else text[:40] + "..."
    loose = _LOOSE.match(text)
    if loose is not None:
        kind, bound = loose.groups()
        if re.fullmatch(_NUMBER, bound):
            return (
                f"{shown!r} has no unit: the bound is a percentage, "
                f"write {kind}:{bound}% for a slowdown of at most {bound} %"
            )
        return f"{shown!r}: the bound is a percentage such as {kind}:5% (0% to 10000%)"
    if text.startswith("cheapest:"):
        return "cheapest takes no bound: write cheapest"
    return f"{shown!r} is not cheapest, slo:X% or least-dram:X% (e.g. slo:5%)"
