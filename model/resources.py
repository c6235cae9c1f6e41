"""Configurations, machine shapes, utilization, and the packing penalty (paper §3.5)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GIB = 1 << 30
MIB = 1 << 20

RESOURCES = ("cpu", "dram", "slow", "llc")


class Configuration(BaseModel):
    """What a VM or pod is given: vCPUs, DRAM, slow memory and a number of LLC ways."""

    model_config = ConfigDict(frozen=True)
    vcpus: int = Field(ge=1)
    dram_bytes: int = Field(ge=0)
    slow_bytes: int = Field(ge=0)
    slow_ratio: float = Field(ge=0.0, le=1.0)
    llc_ways: int = Field(ge=1)


_BINARY_SUFFIXES = (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", GIB), ("Mi", MIB),
                    ("Ki", 1 << 10))  # fmt: skip


def quantity_text(n_bytes: int) -> str:
    """Bytes as people read a Kubernetes memory quantity: the largest binary suffix that keeps
    the number at least 1, at most three significant digits ("3.5Gi", "32Mi", "1.33Gi", "512");
    Kubernetes itself parses every one of them back."""
    if n_bytes < 0:
        raise ValueError(f"a size is not negative: {n_bytes}")
    for suffix, scale in _BINARY_SUFFIXES:
        if n_bytes >= scale:
            value = n_bytes / scale
            text = f"{value:.3g}" if value < 1000 else f"{value:.0f}"
            return text + suffix
    return str(n_bytes)


def split_memory(memory_bytes: int, slow_ratio: float) -> tuple[int, int]:
    """DRAM and slow bytes for a slow ratio; whole bytes that always add up to the footprint."""
    dram = round((1.0 - slow_ratio) * memory_bytes)
    return dram, memory_bytes - dram


def configuration(vcpus: int, memory_bytes: int, slow_ratio: float, llc_ways: int) -> Configuration:
    dram, slow = split_memory(memory_bytes, slow_ratio)
    return Configuration(
        vcpus=vcpus, dram_bytes=dram, slow_bytes=slow, slow_ratio=slow_ratio, llc_ways=llc_ways
    )


MAX_MACHINE_BYTES = 1 << 50
MAX_MACHINE_CPUS = 100_000


class MachineShape(BaseModel):
    """One machine's capacity, the R of Algorithm 1. A rack pool counts as its per-node share."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    # Bounded so that every sum and product of capacities stays exact in a float and fits a
    # database's BIGINT: 1 PiB of each memory, 100,000 CPUs, far above any machine.
    cpus: int = Field(ge=1, le=MAX_MACHINE_CPUS)
    dram_bytes: int = Field(gt=0, le=MAX_MACHINE_BYTES)
    slow_bytes: int = Field(ge=0, le=MAX_MACHINE_BYTES)
    llc_ways: int = Field(ge=1, le=64)
    slow_pooled: bool = False


class Utilization(BaseModel):
    """The cluster's utilization per resource, each in [0, 1]: the U of Algorithm 1."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    cpu: float = Field(default=0.0, ge=0.0, le=1.0)
    dram: float = Field(default=0.0, ge=0.0, le=1.0)
    slow: float = Field(default=0.0, ge=0.0, le=1.0)
    llc: float = Field(default=0.0, ge=0.0, le=1.0)

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.cpu, self.dram, self.slow, self.llc)


class Demand(BaseModel):
    """A configuration's demand as a fraction of one machine's capacity, per resource: D_i."""

    model_config = ConfigDict(frozen=True)
    cpu: float
    dram: float
    slow: float
    llc: float

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.cpu, self.dram, self.slow, self.llc)


def demand(config: Configuration, machine: MachineShape) -> Demand:
    if machine.slow_bytes:
        slow = config.slow_bytes / machine.slow_bytes
    else:  # no slow tier: any slow memory is an impossible demand, none is no demand
        slow = float("inf") if config.slow_bytes else 0.0
    return Demand(
        cpu=config.vcpus / machine.cpus,
        dram=config.dram_bytes / machine.dram_bytes,
        slow=slow,
        llc=config.llc_ways / machine.llc_ways,
    )


def fits(config: Configuration, machine: MachineShape) -> bool:
    return (
        config.vcpus <= machine.cpus
        and config.dram_bytes <= machine.dram_bytes
        and config.slow_bytes <= machine.slow_bytes
        and config.llc_ways <= machine.llc_ways
    )


def packing_penalty(d: Demand, u: Utilization) -> float:
    """D_i . U: a candidate that leans on resources the cluster is short of costs more."""
    return sum(di * ui for di, ui in zip(d.as_tuple(), u.as_tuple(), strict=True))
