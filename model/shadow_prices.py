"""Shadow prices: what a unit of each resource is worth to *this* cluster's packing.

A price profile prices CPU, DRAM, slow memory and LLC ways from list prices or die area. A
cluster that runs short of one resource values it above that: one more way, where ways bind,
saves a fraction of a machine; one more GiB of slow memory, where nothing is short of it, saves
nothing. Algorithm 1's band (within T of the optimum) measured in list prices then spends the
wrong currency, and configurations that hog the scarce resource look cheap.

The value is read off the LP relaxation of the cluster's packing. Classes of VMs arrive at their
rates; each VM of a class runs in one of the class's options (the configurations the service may
give it) and holds that option's demand for its run time, so in steady state a class keeps
rate x seconds VMs of an option present (Little's law). The LP chooses how each class's arrivals
split over its options to need the fewest machines, fractional machines allowed:

    minimise N  subject to, for each resource r:
        sum over classes c and options o of x[c, o] * seconds[o] * demand[o, r] <= N * capacity[r]
        sum over o of x[c, o] = rate[c]   (x >= 0, arrivals per second)

The dual value mu[r] of resource r's constraint is the machines saved per unit of r held (their
sum weighted by capacity is 1). A machine's hour at list prices times mu[r] is r's shadow price:
a whole machine costs the same in both currencies, split by what the packing is short of. Only
resources that bind get a price; they get the whole machine's.

OR-Tools' GLOP solves the LP. `ShadowPrices.currency` turns the result into a price profile:
`list` (as given), `shadow`, or a `blend` (the mean of the two by default), which an operator
may store and recommend with like any other profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ortools.linear_solver import pywraplp

from model.capacity import MachineKind, WorkloadClass
from model.errors import InvalidRequest
from model.pricing import PriceProfile
from model.resources import GIB

RESOURCES = ("cpu", "dram", "slow", "llc")
Currency = Literal["list", "shadow", "blend"]
DEFAULT_BLEND = 0.5  # the blend's weight on shadow prices
# Duals below this (machines per unit held) are solver noise, not a price.
_DUAL_FLOOR = 1e-12


@dataclass(frozen=True)
class ShadowPrices:
    machines: float  # the LP's fluid machine count (a lower bound on any packing's)
    per_unit: tuple[float, float, float, float]  # mu: machines saved per unit held (cpu, B, B, way)
    machine_hour: float  # one machine's hour at list prices
    list_prices: PriceProfile

    @property
    def binding(self) -> tuple[str, ...]:
        """The resources the packing is short of (those with a price)."""
        return tuple(r for r, mu in zip(RESOURCES, self.per_unit, strict=True) if mu > 0.0)

    def shadow_profile(self) -> PriceProfile:
        mu_cpu, mu_dram, mu_slow, mu_llc = self.per_unit
        m = self.machine_hour
        return self.list_prices.model_copy(
            update={
                "name": f"{self.list_prices.name}-shadow",
                "vcpu_hour": mu_cpu * m,
                "dram_gib_hour": mu_dram * GIB * m,
                "slow_gib_hour": mu_slow * GIB * m,
                "llc_way_hour": mu_llc * m,
            }
        )

    def currency(self, kind: Currency, blend: float = DEFAULT_BLEND) -> PriceProfile:
        """The price profile to decide in: list prices, shadow prices, or `blend` x shadow +
        (1 - blend) x list."""
        if kind == "list":
            return self.list_prices
        shadow = self.shadow_profile()
        if kind == "shadow":
            return shadow
        if not 0.0 <= blend <= 1.0:
            raise InvalidRequest("blend", "must lie between 0 and 1")
        listed = self.list_prices
        fields = ("vcpu_hour", "dram_gib_hour", "slow_gib_hour", "llc_way_hour")
        return listed.model_copy(
            update={
                "name": f"{listed.name}-blend{blend:g}",
                **{
                    f: (1.0 - blend) * getattr(listed, f) + blend * getattr(shadow, f)
                    for f in fields
                },
            }
        )


def shadow_prices(
    classes: Sequence[WorkloadClass], kind: MachineKind, prices: PriceProfile
) -> ShadowPrices:
    """The LP relaxation's duals for `classes` packed on machines of `kind` (module text)."""
    if not classes or not any(c.arrivals_per_hour > 0 for c in classes):
        raise InvalidRequest("classes", "at least one class with arrivals")
    capacity = kind.capacity()
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with every OR-Tools wheel
        raise RuntimeError("OR-Tools' GLOP solver is not available")
    machines = solver.NumVar(0.0, solver.infinity(), "machines")
    load: list[list[tuple[Any, float]]] = [[] for _ in RESOURCES]
    for c, cls in enumerate(classes):
        rate = cls.arrivals_per_hour / 3600.0
        share = [
            solver.NumVar(0.0, solver.infinity(), f"x_{c}_{o}") for o in range(len(cls.options))
        ]
        solver.Add(solver.Sum(share) == rate)
        for o, opt in enumerate(cls.options):
            demand = (opt.vcpus, opt.dram_bytes, opt.slow_bytes, opt.llc_ways)
            for r, d in enumerate(demand):
                # Units scaled by capacity, so that every row is a share of a machine.
                if capacity[r] > 0 and d > 0:
                    load[r].append((share[o], opt.seconds * d / capacity[r]))
    rows: list[Any] = []  # a row's constraint, None for a resource the machine lacks
    for r, terms in enumerate(load):
        expr = solver.Sum([v * a for v, a in terms]) if terms else 0.0
        if capacity[r] <= 0:
            rows.append(None)
            continue
        rows.append(solver.Add(machines - expr >= 0.0))
    solver.Minimize(machines)
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:  # pragma: no cover - the LP is always feasible
        raise RuntimeError(f"the packing LP did not solve (status {status})")
    # Rows are shares of a machine, so a row's dual is machines per machine-share: divide by the
    # capacity for machines per unit held.
    per_unit = [
        0.0 if row is None else max(abs(row.dual_value()), 0.0) / capacity[r]
        for r, row in enumerate(rows)
    ]
    mu = tuple(x if x * capacity[r] > _DUAL_FLOOR else 0.0 for r, x in enumerate(per_unit))
    return ShadowPrices(
        machines=machines.solution_value(),
        per_unit=(mu[0], mu[1], mu[2], mu[3]),
        machine_hour=kind.hourly_price(prices),
        list_prices=prices,
    )
