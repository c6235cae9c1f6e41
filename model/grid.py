"""The configuration grid: slow-memory ratios x LLC way counts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

PAPER_SLOW_RATIOS = tuple(round(0.1 * i, 1) for i in range(11))
PAPER_LLC_WAYS = (1, 2, 3, 4, 12, 20, 28)


class Grid(BaseModel):
    """Candidate slow ratios and way counts; every pair is a candidate configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    name: str
    slow_ratios: tuple[float, ...] = Field(min_length=1, max_length=1001)
    llc_ways: tuple[int, ...] = Field(min_length=1, max_length=64)

    @field_validator("slow_ratios")
    @classmethod
    def _ratios(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(r < 0 or r > 1 for r in v):
            raise ValueError("slow ratios lie in [0, 1]")
        if list(v) != sorted(set(v)):
            raise ValueError("slow ratios must be strictly increasing")
        return v

    @field_validator("llc_ways")
    @classmethod
    def _ways(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(w < 1 for w in v):
            raise ValueError("way counts are at least 1")
        if list(v) != sorted(set(v)):
            raise ValueError("way counts must be strictly increasing")
        return v

    @property
    def size(self) -> int:
        return len(self.slow_ratios) * len(self.llc_ways)


def paper_grid() -> Grid:
    """The 77 candidates of paper §4.1: 11 slow ratios x 7 way counts."""
    return Grid(name="paper-77", slow_ratios=PAPER_SLOW_RATIOS, llc_ways=PAPER_LLC_WAYS)


def host_grid(llc_ways: int, min_llc_ways: int = 1, ratio_steps: int = 10) -> Grid:
    """Every way count CAT can give on a host, by ratio steps of 1/ratio_steps."""
    if not 1 <= min_llc_ways <= llc_ways:
        raise ValueError("need 1 <= min_llc_ways <= llc_ways")
    ratios = tuple(round(i / ratio_steps, 6) for i in range(ratio_steps + 1))
    return Grid(
        name=f"host-{ratio_steps + 1}x{llc_ways - min_llc_ways + 1}",
        slow_ratios=ratios,
        llc_ways=tuple(range(min_llc_ways, llc_ways + 1)),
    )
