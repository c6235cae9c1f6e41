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

import math
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
LOAD_RESOLUTION = 1e-12


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
    capacity = kind.capacity()
    # Each option's load on each resource, in machines: rate x seconds x demand / capacity (the
    # VMs of the class that would be present in it). Solved in shares of each class (x sums to
    # 1) and scaled by the largest load, so that any bounded input gives the solver numbers near
    # 1; loads below LOAD_RESOLUTION of the largest are nothing next to it.
    loads = [
        [
            [
                cls.arrivals_per_hour / 3600.0 * opt.seconds * d / capacity[r]
                if capacity[r] > 0
                else 0.0
                for r, d in enumerate((opt.vcpus, opt.dram_bytes, opt.slow_bytes, opt.llc_ways))
            ]
            for opt in cls.options
        ]
        for cls in classes
        if cls.arrivals_per_hour > 0
    ]
    scale = max((a for c in loads for o in c for a in o), default=0.0)
    if not loads or not (0.0 < scale < math.inf):
        raise InvalidRequest("classes", "at least one class with arrivals and a finite load")
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:  # pragma: no cover - GLOP ships with every OR-Tools wheel
        raise RuntimeError("OR-Tools' GLOP solver is not available")
    machines = solver.NumVar(0.0, solver.infinity(), "machines")
    terms: list[list[tuple[Any, float]]] = [[] for _ in RESOURCES]
    for c, options in enumerate(loads):
        share = [solver.NumVar(0.0, 1.0, f"x_{c}_{o}") for o in range(len(options))]
        solver.Add(solver.Sum(share) == 1.0)
        for o, load in enumerate(options):
            for r, a in enumerate(load):
                if a / scale >= LOAD_RESOLUTION:
                    terms[r].append((share[o], a / scale))
    rows: list[Any] = []  # a row's constraint, None for a resource the machine lacks
    for r, row_terms in enumerate(terms):
        if capacity[r] <= 0:
            rows.append(None)
            continue
        expr = solver.Sum([v * a for v, a in row_terms]) if row_terms else 0.0
        rows.append(solver.Add(machines - expr >= 0.0))
    solver.Minimize(machines)
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        raise InvalidRequest(
            "classes", f"the packing LP has no optimum for these numbers (GLOP status {status})"
        )
    # Rows are shares of a machine, so a row's dual is the share of a machine's price a machine's
    # worth of the resource carries: divided by the capacity, machines per unit held.
    per_unit = [
        0.0 if row is None else abs(row.dual_value()) / capacity[r] for r, row in enumerate(rows)
    ]
    mu = tuple(x if x * capacity[r] > _DUAL_FLOOR else 0.0 for r, x in enumerate(per_unit))
    return ShadowPrices(
        machines=machines.solution_value() * scale,
        per_unit=(mu[0], mu[1], mu[2], mu[3]),
        machine_hour=kind.hourly_price(prices),
        list_prices=prices,
    )
