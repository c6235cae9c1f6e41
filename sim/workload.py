"""How a user describes a workload to the simulator (format `tmc.sim-workload/v1`, docs/sim.md).

A workload is a set of tagged data structures, each with its size, how often the program reaches
it past the private caches (LLC accesses per kilo-instruction), which parts it touches (its
locality pattern), whether its addresses come from earlier loads (pointer chasing) and how much of
it is written; plus the core's own speed and how much of the program to run. The same document
loads from TOML or JSON.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.bundle import Tag
from model.resources import MIB

WORKLOAD_SCHEMA: Literal["tmc.sim-workload/v1"] = "tmc.sim-workload/v1"
LINE_BYTES = 64
# Structures start on 2 MiB boundaries, as the paper's tagging allocator serves each tag from
# separate 2 MiB chunks (§3.1): no line is shared between two tags.
CHUNK_BYTES = 2 * MIB


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Uniform(_Spec):
    """Every object of the structure equally likely (a hash table probed by random keys)."""

    kind: Literal["uniform"] = "uniform"
    object_bytes: int = Field(default=LINE_BYTES, ge=1, description="bytes read per visit")


class Zipf(_Spec):
    """Object popularity falls as rank^-exponent (YCSB's zipfian keys, power-law degrees).

    Ranks are scattered over the structure by a fixed permutation, so the hot objects are not
    adjacent in memory.
    """

    kind: Literal["zipf"] = "zipf"
    exponent: float = Field(gt=0.0, le=3.0)
    object_bytes: int = Field(default=LINE_BYTES, ge=1)


class HotSet(_Spec):
    """A hot fraction of the objects receives a given share of the visits, uniformly within."""

    kind: Literal["hotset"] = "hotset"
    hot_fraction: float = Field(gt=0.0, le=1.0)
    hot_share: float = Field(ge=0.0, le=1.0)
    object_bytes: int = Field(default=LINE_BYTES, ge=1)


class Stream(_Spec):
    """Sequential sweeps, with optional stencil reuse of earlier planes.

    Each visit reads `burst_lines` new consecutive lines of one of `streams` concurrent sweep
    positions (e.g. one per thread); after each new line, the lines `plane_kib`, 2 x `plane_kib`,
    ... behind it are read again `plane_reuses` times (a stencil's neighbour planes). With
    `run_kib` set, a sweep jumps to a random place after that many KiB (short runs such as
    adjacency lists); otherwise it continues, wrapping at the end.
    """

    kind: Literal["stream"] = "stream"
    burst_lines: int = Field(default=1, ge=1, le=4096)
    streams: int = Field(default=1, ge=1, le=1024)
    run_kib: float | None = Field(default=None, gt=0)
    plane_kib: float | None = Field(default=None, gt=0)
    plane_reuses: int = Field(default=0, ge=0, le=16)

    @model_validator(mode="after")
    def _planes(self) -> Stream:
        if self.plane_reuses and self.plane_kib is None:
            raise ValueError("plane_reuses needs plane_kib")
        return self


class TraceFile(_Spec):
    """Byte offsets into the structure, one per access, replayed in order (a `.npy` int64 array).

    A relative path is taken from the workload file's folder.
    """

    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)


Pattern = Annotated[Uniform | Zipf | HotSet | Stream | TraceFile, Field(discriminator="kind")]


class StructureSpec(_Spec):
    tag: Tag
    size_mib: float = Field(gt=0.0, le=1 << 20)
    apki: float = Field(
        ge=0.0, le=1000.0, description="LLC accesses (L2 misses) per 1000 instructions"
    )
    pattern: Pattern
    dependent_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of visits whose address comes from the previous load (pointer chase)",
    )
    write_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    instructions_between_lines: float = Field(
        default=4.0,
        ge=1.0,
        le=10_000.0,
        description="mean instructions between two accesses of one visit (a copy loop: few)",
    )
    note: str = Field(default="", max_length=2000, description="why these numbers")

    @property
    def size_bytes(self) -> int:
        # Whole lines: the simulator's unit of placement and caching.
        lines = max(1, round(self.size_mib * MIB / LINE_BYTES))
        return lines * LINE_BYTES

    @property
    def lines(self) -> int:
        return self.size_bytes // LINE_BYTES


class Workload(_Spec):
    schema_version: Literal["tmc.sim-workload/v1"] = WORKLOAD_SCHEMA
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    input_label: str = Field(default="default", max_length=128)
    version: str = Field(default="sim-1", max_length=128)
    vcpus: int = Field(ge=1, le=4096)
    instructions: int = Field(gt=0, description="retired by the whole run, all vCPUs together")
    cpi_core: float = Field(
        gt=0.0, le=100.0, description="cycles per instruction of on-core work (LLC hits free)"
    )
    trace_accesses: int = Field(
        default=2_000_000, ge=1_000, le=200_000_000, description="accesses simulated and measured"
    )
    warmup_accesses: int = Field(
        default=500_000, ge=0, le=200_000_000, description="accesses simulated before measuring"
    )
    structures: list[StructureSpec] = Field(min_length=1, max_length=4096)
    note: str = Field(default="", max_length=10_000)
    # Where relative trace paths resolve; set by `load_workload`, never serialised.
    source_dir: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        tags = [s.tag for s in self.structures]
        if len(set(tags)) != len(tags):
            raise ValueError("structure tags must be unique")
        if sum(s.apki for s in self.structures) <= 0.0:
            raise ValueError("at least one structure must be accessed (apki > 0)")
        if self.footprint_bytes >= 1 << 37:
            raise ValueError("footprint above 128 GiB is beyond the simulator's line numbering")
        return self

    @property
    def footprint_bytes(self) -> int:
        return sum(s.size_bytes for s in self.structures)

    @property
    def accesses_per_instruction(self) -> float:
        return sum(s.apki for s in self.structures) / 1000.0


def load_workload(path: str | Path) -> Workload:
    """A workload from a `.toml` or `.json` file."""
    p = Path(path)
    text = p.read_text()
    data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    data["source_dir"] = str(p.resolve().parent)
    return Workload.model_validate(data)


def dump_workload(workload: Workload) -> str:
    """JSON form of a workload (the TOML files are hand-written; JSON is what tools exchange)."""
    return workload.model_dump_json(indent=2, exclude_none=True)
