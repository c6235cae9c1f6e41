"""Price profiles: hourly unit prices with their provenance, and Eq. 1 (cost = price x time).

A profile is named and versioned; once a recommendation used a version, that version must never
change (the service enforces immutability, the model only refuses nonsense).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from model.resources import GIB, Configuration

# Open, per-resource list prices: Google Compute Engine N1 custom machine types, us-central1,
# on-demand. The paper fitted Azure Msv2 prices by least squares but did not publish the result;
# these are the closest openly published per-vCPU and per-GiB decomposition.
LIST_VCPU_HOUR = 0.033174
LIST_DRAM_GIB_HOUR = 0.004446
# Paper §4.1: 3DXP memory costs 0.4x DRAM per GiB.
PAPER_SLOW_TO_DRAM = 0.4
# Share of a server CPU die's area taken by its LLC. The paper prices an LLC way by the LLC's area
# share ([83]) without printing the figure; 0.2 is our estimate for recent Xeon dies.
LLC_DIE_AREA_SHARE = 0.2
# The paper's reference machine (§4.1): 12 cores sharing a 48-way LLC.
REFERENCE_CORES = 12
REFERENCE_LLC_WAYS = 48
# Every configuration holds at least one vCPU and one LLC way, so a profile that prices either at
# least this much gives every configuration a positive cost, and costs can be compared as ratios
# (Algorithm 1's C_i / C_min). Memory alone cannot: all-fast holds no slow memory, all-slow no DRAM.
MIN_CORE_PRICE_HOUR = 1e-6


def check_core_priced(llc_way_hour: float, info: ValidationInfo) -> float:
    """For a field validator on `llc_way_hour` (declared after `vcpu_hour`)."""
    vcpu = info.data.get("vcpu_hour")
    if vcpu is not None and max(vcpu, llc_way_hour) < MIN_CORE_PRICE_HOUR:
        raise ValueError(
            f"vcpu_hour or llc_way_hour must be at least {MIN_CORE_PRICE_HOUR:g}: every"
            " configuration holds a vCPU and a way, and a configuration that costs nothing"
            " makes every cost ratio undefined"
        )
    return llc_way_hour


class PriceProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    version: int = Field(ge=1)
    currency: str = Field(default="USD", min_length=3, max_length=3)
    vcpu_hour: float = Field(ge=0, description="one vCPU's core, without its LLC share")
    dram_gib_hour: float = Field(ge=0)
    slow_gib_hour: float = Field(ge=0)
    llc_way_hour: float = Field(ge=0)
    provenance: str = Field(min_length=1, max_length=4000)
    parameters: dict[str, float] = Field(
        default_factory=dict, description="the inputs the unit prices were derived from"
    )

    _core_priced = field_validator("llc_way_hour")(check_core_priced)

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def hourly_price(self, config: Configuration) -> float:
        return (
            config.vcpus * self.vcpu_hour
            + config.dram_bytes / GIB * self.dram_gib_hour
            + config.slow_bytes / GIB * self.slow_gib_hour
            + config.llc_ways * self.llc_way_hour
        )

    def cost(self, config: Configuration, seconds: float) -> float:
        """Eq. 1 for a throughput-bound workload: hourly price x execution time."""
        return self.hourly_price(config) * seconds / 3600.0


def paper_price_profile(
    *,
    vcpu_list_hour: float = LIST_VCPU_HOUR,
    dram_gib_hour: float = LIST_DRAM_GIB_HOUR,
    slow_to_dram: float = PAPER_SLOW_TO_DRAM,
    llc_area_share: float = LLC_DIE_AREA_SHARE,
    cores: int = REFERENCE_CORES,
    llc_ways: int = REFERENCE_LLC_WAYS,
    name: str = "paper-3dxp",
    version: int = 1,
) -> PriceProfile:
    """Unit prices by the paper's method, every input explicit.

    A vCPU's list price pays for a core and its fair share of the LLC. Splitting it by die area,
    the core keeps (1 - llc_area_share) of it, and the LLC share of all cores is spread over the
    ways, so a VM with the fair ways-per-core pays exactly the list price.
    """
    way_hour = vcpu_list_hour * llc_area_share * cores / llc_ways
    return PriceProfile(
        name=name,
        version=version,
        vcpu_hour=vcpu_list_hour * (1.0 - llc_area_share),
        dram_gib_hour=dram_gib_hour,
        slow_gib_hour=dram_gib_hour * slow_to_dram,
        llc_way_hour=way_hour,
        provenance=(
            "TMC paper §4.1 method: slow memory at slow_to_dram x the DRAM price per GiB; an LLC"
            " way priced by the LLC's share of die area, spread over the ways of a"
            f" {cores}-core, {llc_ways}-way machine. vCPU and DRAM list prices: GCE N1 custom"
            " machine types, us-central1, on demand (the paper's Azure Msv2 fit is unpublished)."
            f" LLC die-area share {llc_area_share} is tmc's estimate."
        ),
        parameters={
            "vcpu_list_hour": vcpu_list_hour,
            "dram_gib_hour": dram_gib_hour,
            "slow_to_dram": slow_to_dram,
            "llc_area_share": llc_area_share,
            "cores": float(cores),
            "llc_ways": float(llc_ways),
        },
    )


DEFAULT_PRICE_PROFILE = paper_price_profile()
