"""The simulated host: core, LLC and the two memory tiers, and presets for the paper's machines.

The presets carry the host-kind names the rest of tmc uses for these machines (the cluster's
node kinds), so that a simulated profile is matched to the nodes it stands in for; `cpu_model`
says the profile was simulated.

Numbers are the paper's where it gives them (§4.1: 12 cores, 48-way 12 MiB LLC, 24 GiB DRAM at
100 ns, 3DXP at 3x DRAM latency, CXL +85 ns, 8-node rack pools) and published device figures
otherwise; docs/sim.md says where each comes from.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.bundle import TierKind
from model.resources import GIB, MIB
from sim.workload import LINE_BYTES

# Loaded-latency shape: extra = idle x kappa x rho / (1 - rho). kappa = 1/12 puts +33 % at 80 %
# utilisation: the paper's 3DXP "knee" (§3.6: 300 ns -> 400 ns at ~80 % of peak read bandwidth).
DEFAULT_KAPPA = 1.0 / 12.0
CXL_EXTRA_NS = 85.0


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Tier(_Spec):
    kind: TierKind
    latency_ns: float = Field(gt=0, le=100_000, description="idle load-to-use latency of a miss")
    read_bandwidth_bytes_per_second: float = Field(gt=0)
    write_bandwidth_bytes_per_second: float = Field(gt=0)
    capacity_bytes: int = Field(ge=0, description="per machine (a pool: this node's share)")
    background_utilization: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="of the tier's bandwidth, used by others"
    )
    loaded_latency_factor: float = Field(default=DEFAULT_KAPPA, ge=0.0, le=10.0)


class Core(_Spec):
    """The out-of-order window that lets independent misses overlap (Skylake-SP-like)."""

    rob_instructions: int = Field(default=224, ge=1, le=4096)
    mshrs: int = Field(default=12, ge=1, le=256, description="L1 fill buffers: misses in flight")
    llc_hit_ns: float = Field(default=20.0, ge=0.0, le=1000.0)


class Host(_Spec):
    host_kind: str = Field(min_length=1, max_length=128)
    cpu_model: str = Field(default="simulated 12-core Xeon-class (tmc sim)", max_length=256)
    cpu_frequency_hz: float = Field(default=2.5e9, gt=1e7, le=1e11)
    cores: int = Field(default=12, ge=1, le=4096)
    llc_ways: int = Field(default=48, ge=1, le=63)
    llc_size_bytes: int = Field(default=12 * MIB, gt=0)
    min_llc_ways: int = Field(default=1, ge=1, le=63)
    core: Core = Field(default_factory=Core)
    fast_tier: Tier
    slow_tier: Tier
    bandwidth_window_ns: float = Field(
        default=8000.0, gt=0, description="how far back a tier's utilisation is measured"
    )

    @model_validator(mode="after")
    def _geometry(self) -> Host:
        sets = self.llc_size_bytes // (LINE_BYTES * self.llc_ways)
        if sets * LINE_BYTES * self.llc_ways != self.llc_size_bytes:
            raise ValueError("llc_size_bytes must be lines x ways x a whole number of sets")
        if sets & (sets - 1):
            raise ValueError("the LLC's number of sets (size / 64 B / ways) must be a power of two")
        if self.min_llc_ways > self.llc_ways:
            raise ValueError("min_llc_ways exceeds llc_ways")
        return self

    @property
    def simulated_sets(self) -> int:
        # Every set is simulated: the stack pass costs the same per access whatever the count.
        return self.llc_size_bytes // (LINE_BYTES * self.llc_ways)

    def ns_to_cycles(self, ns: float) -> float:
        return ns * self.cpu_frequency_hz / 1e9


DRAM = Tier(
    kind="dram",
    latency_ns=100.0,
    # Six DDR4-2666 channels: ~128 GB/s peak, of which ~100 GB/s reads are sustainable.
    read_bandwidth_bytes_per_second=100e9,
    write_bandwidth_bytes_per_second=70e9,
    capacity_bytes=24 * GIB,
)


def optane_host() -> Host:
    """Paper §4.1's machine: one 128 GiB 3DXP DIMM per server, 3x DRAM latency."""
    return Host(
        host_kind="xeon-12c-48w-dram24g-optane128g",
        fast_tier=DRAM,
        slow_tier=Tier(
            kind="optane",
            latency_ns=300.0,
            # Peak chosen so that 80 % of it is the paper's ~10 GiB/s read knee (§3.6); writes at
            # the ~2.9x lower rate measured on Optane DC PMM (Izraelevitz et al., 2019).
            read_bandwidth_bytes_per_second=13.4e9,
            write_bandwidth_bytes_per_second=4.6e9,
            capacity_bytes=128 * GIB,
        ),
    )


def cxl_local_host() -> Host:
    """A DRAM-backed CXL expander in the server: DRAM + 85 ns (paper §4.1, after Pond)."""
    return Host(
        host_kind="xeon-12c-48w-dram24g-cxl128g",
        fast_tier=DRAM,
        slow_tier=Tier(
            kind="cxl_local",
            latency_ns=DRAM.latency_ns + CXL_EXTRA_NS,
            # A x8 PCIe 5 link: ~32 GB/s each way before protocol overhead.
            read_bandwidth_bytes_per_second=28e9,
            write_bandwidth_bytes_per_second=24e9,
            capacity_bytes=128 * GIB,
        ),
    )


def cxl_pool_host(
    pool_bytes: int = 384 * GIB,
    nodes: int = 8,
    background_utilization: float = 0.35,
    media: TierKind = "dram",
) -> Host:
    """A rack pool shared by `nodes` servers over CXL: media latency + 85 ns, plus contention.

    The other nodes' traffic is `background_utilization` of the pool's bandwidth. The paper's
    pool holds 3DXP media (`media="optane"`); the default is DRAM-backed, as in Pond.
    """
    media_ns = 300.0 if media == "optane" else DRAM.latency_ns
    read_bw, write_bw = (13.4e9 * 4, 4.6e9 * 4) if media == "optane" else (64e9, 56e9)
    kind = f"xeon-12c-48w-dram24g-cxlpool{pool_bytes // GIB}"
    if (nodes, media) != (8, "dram"):
        kind += f"-{nodes}n-{media}"
    return Host(
        host_kind=kind,
        fast_tier=DRAM,
        slow_tier=Tier(
            kind="cxl_pool",
            latency_ns=media_ns + CXL_EXTRA_NS,
            read_bandwidth_bytes_per_second=read_bw,
            write_bandwidth_bytes_per_second=write_bw,
            capacity_bytes=pool_bytes // nodes,
            background_utilization=background_utilization,
        ),
    )


PRESETS = {"optane": optane_host, "cxl_local": cxl_local_host, "cxl_pool": cxl_pool_host}
