"""Capacity planning with OR-Tools: packing decisions made for many VMs at once.

For a workload mix (per class: arrival rate and the configurations it may
be given, e.g. the candidates Algorithm 1 keeps within T, each with its demand, run time and
cost), which machine kind (the paper's Fig. 9 family: DRAM per machine, local slow memory or a
rack pool) and how many *whole* machines? In steady state a class whose VMs hold option o for
t_o hours has rate x t_o of them present on average (Little's law); the cluster's count is
Poisson, and the plan holds room for its `peak_quantile` (about M + z sqrt(M) for a total mean M,
shared by the classes in proportion to their means). Machines are counted as bins,
not as average use: a VM taking 28 of 48 ways leaves no room for a second one, whatever the
ways' average load says. CP-SAT chooses how many VMs of each class run in each option at the
peak (a mix of options serves the class when its shares of each option's own peak add up to one)
and on which machine each one runs, every machine within its CPUs, DRAM, slow memory and ways
(a pool within its rack's machines); fewest machines first, then the tenants' extra cost. On a
fresh machine the ways of its VMs are laid out as consecutive runs, so CAT's contiguity needs no
constraint of its own (it does in the rebalancer, where runs are already placed). The greedy
answer it is measured against, in the same call, gives every class its cheapest option
(Algorithm 1 at T = 0) and packs the peak first fit decreasing; it is CP-SAT's starting point,
and the answer when CP-SAT does not find fewer machines within its time limit (`status`
"greedy", with a note). Whether the plan holds is checked by simulation (`bench/planning.py`).

Pure: numbers in, plans out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Literal

from ortools.sat.python import cp_model

from model.errors import TmcError
from model.pricing import PriceProfile
from model.resources import GIB, quantity_text

DEFAULT_FILL = 1.0  # share of a machine's resources the plan may fill
DEFAULT_PEAK_QUANTILE = 0.95  # the plan holds room for this quantile of each class's VMs at once
MAX_PACKED_OPTIONS = 12  # per class, the cheapest non-dominated options CP-SAT may mix
MAX_PACKED_MACHINES = 200  # above this, CP-SAT's model grows too large: greedy's answer
RATE_SCALE = 1_000_000
MAX_PLANNED_VMS = 100_000  # VMs at once over all classes: beyond, whole-machine packing is refused
RESOURCES = ("cpu", "dram", "slow", "llc")


# -- capacity planning --------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One configuration a class may be given: demand (vCPUs, DRAM bytes, slow bytes, ways), how
    long a VM holds it (seconds) and what a VM costs its tenant in it."""

    vcpus: int
    dram_bytes: int
    slow_bytes: int
    llc_ways: int
    seconds: float
    cost: float

    def demand(self) -> tuple[float, float, float, float]:
        return (float(self.vcpus), float(self.dram_bytes), float(self.slow_bytes), self.llc_ways)


# The technology of a machine's slow tier, in the words of a profile bundle's tier kinds
# (model.bundle.TierKind), and "none" for a machine of DRAM only.
SlowTier = Literal["none", "optane", "cxl_local", "cxl_pool"]
SLOW_TIERS: tuple[SlowTier, ...] = ("none", "optane", "cxl_local", "cxl_pool")


@dataclass(frozen=True)
class ProfileHost:
    """What planning on other machine kinds needs to know of the host a class's options were
    measured on: its LLC as one workload sees it (the ways of one socket's cache, and their
    bytes when known) and its slow tier's technology when known."""

    llc_ways: int
    llc_size_bytes: int | None = None
    slow_tier: SlowTier | None = None


@dataclass(frozen=True)
class WorkloadClass:
    name: str
    arrivals_per_hour: float
    options: tuple[Option, ...]
    # The options' ways are the measuring host's; None: they are taken as any kind's ways.
    measured_on: ProfileHost | None = None


@dataclass(frozen=True)
class MachineKind:
    """A machine of the paper's family; slow memory is local or a pool shared by a rack.

    `llc_ways` and `llc_size_bytes` are one socket's LLC: CAT divides each socket's L3 into its
    own ways, and a VM runs within one socket, so it can be given ways of one cache only. A
    machine of `sockets` sockets holds `sockets x llc_ways` ways, each socket's VMs within its
    own `llc_ways`. CPUs and memory are the whole machine's."""

    name: str
    cpus: int = 12
    dram_bytes: int = 24 * GIB
    local_slow_bytes: int = 128 * GIB
    pool_bytes: int = 0
    rack_nodes: int = 8
    llc_ways: int = 48
    sockets: int = 1
    llc_size_bytes: int | None = None  # one socket's LLC; None: not stated (no rescaling to it)
    slow_tier: SlowTier | None = None  # None: not stated

    @property
    def slow_share_bytes(self) -> float:
        return self.pool_bytes / self.rack_nodes if self.pool_bytes else self.local_slow_bytes

    @property
    def total_llc_ways(self) -> int:
        return self.sockets * self.llc_ways

    def capacity(self) -> tuple[float, float, float, float]:
        return (
            float(self.cpus),
            float(self.dram_bytes),
            self.slow_share_bytes,
            self.total_llc_ways,
        )

    def hourly_price(self, prices: PriceProfile) -> float:
        """What the machine's resources cost per hour at the profile's unit prices."""
        return (
            self.cpus * prices.vcpu_hour
            + self.dram_bytes / GIB * prices.dram_gib_hour
            + self.slow_share_bytes / GIB * prices.slow_gib_hour
            + self.total_llc_ways * prices.llc_way_hour
        )


PAPER_LLC_BYTES = 12 << 20  # the §4.1 machine: one socket, 48 ways of 12 MiB


def paper_machine_kinds() -> list[MachineKind]:
    """Fig. 9's twelve: 24 or 48 GiB DRAM x 128L, 256L, 128P, 384P, 640P, 896P; the local
    slow memory is Optane-like (the §4.1 machine's), the pools CXL."""
    out = []
    for dram in (24, 48):
        for slow in ("128L", "256L", "128P", "384P", "640P", "896P"):
            size, kind = int(slow[:-1]), slow[-1]
            out.append(
                MachineKind(
                    name=f"{dram}G-{slow}",
                    dram_bytes=dram * GIB,
                    local_slow_bytes=size * GIB if kind == "L" else 0,
                    pool_bytes=size * GIB if kind == "P" else 0,
                    llc_size_bytes=PAPER_LLC_BYTES,
                    slow_tier="optane" if kind == "L" else "cxl_pool",
                )
            )
    return out


# -- a class's options on a kind other than the one it was measured on --------------------------


@dataclass(frozen=True)
class OnKind:
    """A class as planned on one machine kind: its options' ways in the kind's ways, what was
    changed or is doubtful (`reasons`), or why it cannot be planned there at all (`refused`)."""

    workload: WorkloadClass
    reasons: tuple[str, ...] = ()
    refused: str = ""


MAX_WAY_MAPPINGS_SHOWN = 6


def _size(n_bytes: float) -> str:
    """A size as the planner's reasons print it: "3 MiB", "256 KiB"."""
    text = quantity_text(round(n_bytes))
    return f"{text[:-2]} {text[-2:]}B" if text.endswith("i") else f"{text} B"


def on_kind(c: WorkloadClass, kind: MachineKind) -> OnKind:
    """`c` on machines of `kind`. Ways are a share of a cache, so a way count means the same
    only on a cache of the same ways and bytes: an option measured with w of the host's W ways
    of B bytes holds w B / W bytes of cache, and on a kind of W' ways of B' bytes it is given
    as many bytes, ceil(w B W' / (W B')) ways (more ways than one socket has cannot host it).
    Without both sizes a different way count cannot be carried over: the class is refused on
    the kind, with the reason. A slow tier of another technology is said, not refused: the
    plan's times then hold the measuring host's slow-memory latency, an estimate to check by
    profiling on the kind, where refusing would leave a mixed fleet with no plan at all."""
    host = c.measured_on
    if host is None:
        return OnKind(c)
    reasons = []
    if (
        host.slow_tier is not None
        and kind.slow_tier not in (None, "none")
        and host.slow_tier != kind.slow_tier
    ):
        reasons.append(
            f"{c.name}: measured with {host.slow_tier} slow memory, this kind has"
            f" {kind.slow_tier}: its times and costs assume the measured slow tier's latency"
        )
    if host.llc_ways == kind.llc_ways and (
        host.llc_size_bytes is None
        or kind.llc_size_bytes is None
        or host.llc_size_bytes == kind.llc_size_bytes
    ):
        return OnKind(c, tuple(reasons))
    if host.llc_size_bytes is None:
        return OnKind(
            c,
            tuple(reasons),
            f"{c.name}: refused: the profile's host LLC size is unknown, so its ways of"
            f" {host.llc_ways} cannot be carried over to this kind's {kind.llc_ways} ways",
        )
    if kind.llc_size_bytes is None:
        return OnKind(
            c,
            tuple(reasons),
            f"{c.name}: refused: this kind's LLC size is unknown (llc_size_bytes, one"
            f" socket's), so the profile's ways of {host.llc_ways} cannot be carried over to its"
            f" {kind.llc_ways} ways",
        )
    options = tuple(
        replace(o, llc_ways=rescaled_ways(o.llc_ways, host, kind.llc_ways, kind.llc_size_bytes))
        for o in c.options
    )
    pairs = sorted({(o.llc_ways, r.llc_ways) for o, r in zip(c.options, options, strict=True)})
    per_way = host.llc_size_bytes / host.llc_ways
    shown = ", ".join(
        f"{w} of {host.llc_ways} ways ({_size(w * per_way)}) to {r} of {kind.llc_ways} ways"
        for w, r in pairs[:MAX_WAY_MAPPINGS_SHOWN]
    )
    hidden = len(pairs) - MAX_WAY_MAPPINGS_SHOWN
    more = f" and {hidden} more" if hidden > 0 else ""
    reasons.append(f"{c.name}: rescaled from {shown}{more}")
    too_wide = [(w, r) for w, r in pairs if r > kind.llc_ways]
    if too_wide:
        reasons.append(
            f"{c.name}: refused the option(s) of "
            + ", ".join(f"{w} of {host.llc_ways} ways" for w, _ in too_wide)
            + f": as many bytes need {too_wide[0][1]} or more ways, and a socket of this kind"
            f" has {kind.llc_ways}"
        )
    return OnKind(replace(c, options=options), tuple(reasons))


def rescaled_ways(ways: int, host: ProfileHost, kind_ways: int, kind_bytes: int) -> int:
    """The ways of a `kind_ways`-way cache of `kind_bytes` that hold as many bytes as `ways` of
    the host's cache (rounded up: never less cache than measured). Exact integers."""
    if host.llc_size_bytes is None:
        raise ValueError("the profile's host LLC size is unknown")
    num = ways * host.llc_size_bytes * kind_ways
    den = host.llc_ways * kind_bytes
    return max(1, -(-num // den))


@dataclass(frozen=True)
class KindPlan:
    """The plan for one machine kind: whole machines, each VM of the peak on a machine."""

    kind: str
    machines: int  # what the plan asks for: CP-SAT's count, or greedy's when CP-SAT did not beat it
    machine_hour: float
    total_hour: float  # machines x machine price
    tenant_hour: float  # sum over arrivals of their cost, per hour
    load: dict[str, float]  # per resource: held at the peak / (machines x capacity)
    mix: dict[str, list[float]]  # per class: arrivals per hour given each option
    binding: str
    greedy_machines: int  # first fit decreasing, every class in its cheapest option
    status: str  # "optimal", "feasible", "greedy" (CP-SAT did not beat it), "infeasible"
    lower_bound: int = 0  # no plan of these options needs fewer machines (CP-SAT's bound)
    vms: dict[str, list[int]] = field(default_factory=dict)  # per class: VMs at the peak per option
    # per machine: VMs at the peak by "class#option"
    machines_content: list[dict[str, int]] = field(default_factory=list)
    note: str = ""
    # per class: each option's ways on this kind (the measuring host's, rescaled when the
    # kind's cache differs: `on_kind`)
    option_ways: dict[str, list[int]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # what was rescaled, refused or doubtful


@dataclass(frozen=True)
class CapacityPlan:
    best: KindPlan
    kinds: list[KindPlan]
    fill: float
    peak_quantile: float = 0.95


def peak_vms(mean: float, quantile: float) -> int:
    """VMs present at once that a Poisson count with this mean stays within with probability
    `quantile` (about mean + z sqrt(mean))."""
    if mean <= 0:
        return 0
    z = NormalDist().inv_cdf(quantile)
    return max(1, math.ceil(mean + z * math.sqrt(mean) - 1e-9))


def peak_factor(classes: Sequence[WorkloadClass], quantile: float) -> float:
    """The headroom the plan holds over each class's mean count of VMs (Little's law: arrivals
    per hour x hours held, in its cheapest option). The cluster's count is Poisson with the
    classes' total mean M, so its `quantile` is about M + z sqrt(M); every class gets the same
    share of that headroom. (Each class's own quantile, summed, would plan for all classes
    peaking together: with four equal classes, twice the headroom.)"""
    total = sum(
        c.arrivals_per_hour * min(c.options, key=lambda o: (o.cost, o.seconds)).seconds / 3600.0
        for c in classes
    )
    if total <= 0:
        return 1.0
    # A vanishing total (e.g. runs of a few nanoseconds) needs one VM per class, not 1 / total.
    return peak_vms(total, quantile) / max(total, 1e-9)


def planned_vms(mean: float, factor: float) -> int:
    """VMs of a class the plan holds room for, given its mean count and the peak factor."""
    if mean <= 0:
        return 0
    want = mean * factor
    if not math.isfinite(want) or want > MAX_PLANNED_VMS:
        return MAX_PLANNED_VMS + 1  # refused by the caller, without building a huge plan
    return max(1, math.ceil(want - 1e-9))


def _homeless_classes(
    classes: Sequence[WorkloadClass], kind: MachineKind, fill: float
) -> list[str]:
    """The classes none of whose options fits one machine of `kind` at `fill` (the options'
    ways are the kind's: see `on_kind`)."""
    return [c.name for c in classes if not any(_usable(o, kind, fill) for o in c.options)]


_RESOURCE_WORDS = ("vCPUs", "MiB of DRAM", "MiB of slow memory", "LLC ways")


def why_homeless(c: WorkloadClass, kind: MachineKind, fill: float) -> str:
    """Why no option of `c` fits one machine of `kind`: each resource that every option needs
    more of than the machine offers at `fill` (the least any option needs, against what one
    machine offers; ways against one socket's), or, when each resource alone has an option
    that fits, that none fits all at once."""
    cap = list(_per_machine(kind, fill))
    cap[3] = _socket_ways(kind, fill)
    needs = [min(_units(o)[r] for o in c.options) for r in range(4)]
    offers = ["a machine offers"] * 3 + [
        "a socket offers" if kind.sockets > 1 else "a machine offers"
    ]
    short = [
        f"at least {need} {word} ({offer} {have})"
        for need, have, word, offer in zip(needs, cap, _RESOURCE_WORDS, offers, strict=True)
        if need > have
    ]
    what = "; ".join(short) if short else "no option fits every resource at once"
    return f"{c.name}'s {len(c.options)} option(s) need {what}" if short else f"{c.name}: {what}"


def _usable(o: Option, kind: MachineKind, fill: float) -> bool:
    """Whether one VM in option `o` fits one machine of `kind`: within the machine's CPUs and
    memory, and its ways within one socket's cache (CAT's ways are a socket's own)."""
    cap = _per_machine(kind, fill)
    return o.llc_ways <= _socket_ways(kind, fill) and all(
        d <= c for d, c in zip(_units(o), cap, strict=True)
    )


def _socket_ways(kind: MachineKind, fill: float) -> int:
    return math.floor(kind.llc_ways * fill + 1e-9)


# Integer units for CP-SAT and first fit: vCPUs, MiB, MiB, ways.
_MIB = 1 << 20


def _units(o: Option) -> tuple[int, int, int, int]:
    return (o.vcpus, -(-o.dram_bytes // _MIB), -(-o.slow_bytes // _MIB), o.llc_ways)


def _per_machine(kind: MachineKind, fill: float) -> tuple[int, int, int, int]:
    """What one machine offers. A pooled machine may lend a VM the whole pool; the pool's own
    capacity is a per-rack constraint. Ways are counted over all sockets; each VM's ways are
    also one socket's (`_usable`, and each socket's VMs within its ways in the packing)."""
    slow = kind.pool_bytes if kind.pool_bytes else kind.local_slow_bytes
    return (
        math.floor(kind.cpus * fill + 1e-9),
        int(kind.dram_bytes * fill) // _MIB,
        int(slow * fill) // _MIB,
        kind.sockets * _socket_ways(kind, fill),
    )


def _pareto(c: WorkloadClass, kind: MachineKind, fill: float) -> list[int]:
    """The options worth packing: usable on the kind, and not dominated (another option at most
    as large in every resource, held no longer and no dearer)."""
    ok = [i for i, o in enumerate(c.options) if _usable(o, kind, fill)]
    keep = []
    for i in ok:
        a = c.options[i]
        ua = _units(a)
        dominated = False
        for j in ok:
            if j == i:
                continue
            b = c.options[j]
            ub = _units(b)
            no_worse = (
                all(x <= y for x, y in zip(ub, ua, strict=True))
                and b.seconds <= a.seconds
                and b.cost <= a.cost
            )
            if no_worse and (ub != ua or b.seconds != a.seconds or b.cost != a.cost or j < i):
                dominated = True
                break
        if not dominated:
            keep.append(i)
    keep.sort(key=lambda i: c.options[i].cost)
    return keep[:MAX_PACKED_OPTIONS]


class PlanningTimeLimit(TmcError):
    """The plan could not be made within the time it was given."""

    status = 422
    title = "Time limit too short"


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise PlanningTimeLimit(
            "the plan did not finish within time_limit_seconds: give it more time, or plan"
            " fewer VMs (a lower arrival rate or shorter runs)"
        )


def _first_fit_decreasing(
    items: Sequence[tuple[int, int]],
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    fill: float,
    deadline: float | None = None,
) -> list[list[tuple[int, int]]] | None:
    """Whole machines for the VMs (class, option), largest dominant share first; a machine's
    ways are handed out as consecutive runs (a fresh machine's CAT runs are then contiguous).
    None when the pool of a rack cannot hold its machines' slow memory.

    VMs of one (class, option) are alike, so they are placed as a run: each machine, in order,
    takes as many of them as still fit, and new machines are opened full. That is what placing
    them one at a time, each on the first machine with room, gives (a machine that had no room
    for one of them never gains room), in time linear in the machines per run, not per VM.
    Within a machine, each VM's ways come from one socket: the first with room."""
    cap = _per_machine(kind, fill)
    socket_cap = _socket_ways(kind, fill)

    def share(it: tuple[int, int]) -> float:
        u = _units(classes[it[0]].options[it[1]])
        return max(d / c if c else (math.inf if d else 0.0) for d, c in zip(u, cap, strict=True))

    runs: dict[tuple[int, int], int] = {}
    for it in items:  # dict order: first appearance, which a stable sort keeps among equals
        runs[it] = runs.get(it, 0) + 1
    machines: list[list[tuple[int, int]]] = []
    free: list[list[int]] = []
    sockets_free: list[list[int]] = []  # per machine, each socket's free ways
    pool_free: list[int] = []
    pool = int(kind.pool_bytes * fill) // _MIB
    for it in sorted(runs, key=share, reverse=True):
        _check_deadline(deadline)
        u = _units(classes[it[0]].options[it[1]])
        left = runs[it]
        for k, f in enumerate(free):
            if not left:
                break
            room = _room(
                u, f, pool_free[k // kind.rack_nodes] if kind.pool_bytes else None, sockets_free[k]
            )
            if room <= 0:
                continue
            take = min(room, left)
            for r in range(4):
                f[r] -= take * u[r]
            _take_ways(sockets_free[k], u[3], take)
            if kind.pool_bytes:
                pool_free[k // kind.rack_nodes] -= take * u[2]
            machines[k].extend([it] * take)
            left -= take
        while left:
            k = len(machines)
            if kind.pool_bytes and k % kind.rack_nodes == 0:
                pool_free.append(pool)
            rack = k // kind.rack_nodes
            if kind.pool_bytes and u[2] > pool_free[rack]:
                return None
            # A new machine takes at least one (an option is usable on the kind, so it fits).
            sockets = [socket_cap] * kind.sockets
            room = max(1, _room(u, cap, pool_free[rack] if kind.pool_bytes else None, sockets))
            take = min(room, left)
            machines.append([it] * take)
            free.append([c - take * d for c, d in zip(cap, u, strict=True)])
            _take_ways(sockets, u[3], take)
            sockets_free.append(sockets)
            if kind.pool_bytes:
                pool_free[rack] -= take * u[2]
            left -= take
    return machines


def _room(
    u: Sequence[int], free: Sequence[int], pool_free: int | None, sockets: Sequence[int]
) -> int:
    """How many VMs of demand `u` fit in `free` (and in the rack pool's `pool_free`), each
    VM's ways within one of the `sockets`' free ways."""
    if min(free) < 0:  # overfilled by a VM larger than the machine: nothing more fits
        return 0
    room = min((x // d for d, x in zip(u, free, strict=True) if d), default=1 << 62)
    if pool_free is not None and u[2]:
        room = min(room, pool_free // u[2])
    if u[3]:
        room = min(room, sum(max(0, w) // u[3] for w in sockets))
    return room


def _take_ways(sockets: list[int], ways: int, vms: int) -> None:
    """Hands `vms` VMs of `ways` ways each out of the sockets' free ways, first fit."""
    for s, free in enumerate(sockets):
        if not vms or not ways:
            return
        take = min(vms, max(0, free) // ways)
        sockets[s] -= take * ways
        vms -= take


def _peak_items(
    classes: Sequence[WorkloadClass], choice: Sequence[int], quantile: float
) -> list[tuple[int, int]]:
    factor = peak_factor(classes, quantile)
    counts = [
        planned_vms(c.arrivals_per_hour * c.options[oi].seconds / 3600.0, factor)
        for c, oi in zip(classes, choice, strict=True)
    ]
    if sum(counts) > MAX_PLANNED_VMS:
        raise ValueError(
            f"the mix holds {sum(counts):,} VMs at once, more than a plan of whole machines"
            f" takes ({MAX_PLANNED_VMS:,})"
        )
    items = []
    for ci, (oi, n) in enumerate(zip(choice, counts, strict=True)):
        items += [(ci, oi)] * n
    return items


def greedy_plan(
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    fill: float,
    quantile: float,
    deadline: float | None = None,
) -> list[list[tuple[int, int]]] | None:
    """Every class in its cheapest usable option (Algorithm 1 at T = 0), its peak of VMs packed
    first fit decreasing. None when some class has no usable option."""
    choice = []
    for c in classes:
        ok = [i for i, o in enumerate(c.options) if _usable(o, kind, fill)]
        if not ok:
            return None
        choice.append(min(ok, key=lambda i: (c.options[i].cost, i)))
    items = _peak_items(classes, choice, quantile)
    return _first_fit_decreasing(items, classes, kind, fill, deadline)


def greedy_machines(
    classes: Sequence[WorkloadClass], kind: MachineKind, fill: float, quantile: float = 0.95
) -> int:
    """Whole machines of the greedy plan; -1 when it cannot host the mix."""
    g = greedy_plan(classes, kind, fill, quantile)
    return -1 if g is None else len(g)


def plan_kind(
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    prices: PriceProfile,
    *,
    fill: float = DEFAULT_FILL,
    peak_quantile: float = DEFAULT_PEAK_QUANTILE,
    time_limit_seconds: float = 5.0,
    workers: int = 1,
    deadline: float | None = None,
) -> KindPlan:
    """Bin packing over whole machines with CP-SAT: how many VMs of each class run in each
    option at the peak (every class's arrivals served: sum over options of VMs / hours held is
    at least its arrival rate with peak headroom), which machine each VM is on, every machine
    within its CPUs, DRAM, slow memory and ways, a pool within its rack. Fewest machines first,
    then the tenants' cost. Started from greedy's plan; when CP-SAT does not find fewer machines
    within its time limit the answer is greedy's, and `status` and `note` say so. `deadline`
    (time.monotonic()) bounds the whole call, greedy included: past it, PlanningTimeLimit.
    A class measured on another host is planned with its ways carried over to the kind's
    cache (`on_kind`); `reasons` says what was rescaled, refused or is doubtful."""
    _check_classes(classes)
    _check_kind(kind)
    fitted = [on_kind(c, kind) for c in classes]
    reasons = [r for f in fitted for r in f.reasons]
    ways = {f.workload.name: [o.llc_ways for o in f.workload.options] for f in fitted}
    refused = [f.refused for f in fitted if f.refused]
    if refused:
        plan = KindPlan(
            kind.name, -1, kind.hourly_price(prices), math.inf, math.inf, {}, {}, "-", -1,
            "infeasible", note="; ".join(refused),
        )  # fmt: skip
    else:
        plan = _plan_fitted(
            [f.workload for f in fitted],
            kind,
            prices,
            fill=fill,
            peak_quantile=peak_quantile,
            time_limit_seconds=time_limit_seconds,
            workers=workers,
            deadline=deadline,
        )
    return replace(plan, option_ways=ways, reasons=reasons)


def _plan_fitted(
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    prices: PriceProfile,
    *,
    fill: float,
    peak_quantile: float,
    time_limit_seconds: float,
    workers: int,
    deadline: float | None,
) -> KindPlan:
    """`plan_kind` for classes whose options' ways are the kind's."""
    price = kind.hourly_price(prices)
    greedy = greedy_plan(classes, kind, fill, peak_quantile, deadline)
    if greedy is None:
        homeless = [c for c in classes if c.name in _homeless_classes(classes, kind, fill)]
        why = "; ".join(why_homeless(c, kind, fill) for c in homeless)
        return KindPlan(
            kind.name, -1, price, math.inf, math.inf, {}, {}, "-", -1, "infeasible",
            note=f"no option of {', '.join(c.name for c in homeless)} fits this machine kind: {why}"
            " (a workload's options are its latest decision's candidates within T)",
        )  # fmt: skip
    n_greedy = len(greedy)
    cap = _per_machine(kind, fill)
    greedy_choice = {(ci, oi) for m in greedy for ci, oi in m}
    keep = [_pareto(c, kind, fill) for c in classes]
    for ci, oi in greedy_choice:
        if oi not in keep[ci]:
            keep[ci].append(oi)
    if n_greedy > MAX_PACKED_MACHINES or n_greedy <= 1:
        why = (
            f"greedy needs {n_greedy} machines, more than CP-SAT is given ({MAX_PACKED_MACHINES})"
            if n_greedy > 1
            else "one machine: nothing to pack"
        )
        return _kind_plan(classes, kind, price, greedy, n_greedy, "greedy", n_greedy, why)
    model = cp_model.CpModel()
    used = [model.new_bool_var(f"used{k}") for k in range(n_greedy)]
    for k in range(n_greedy - 1):
        model.add_implication(used[k + 1], used[k])
    count: dict[tuple[int, int], cp_model.IntVar] = {}
    on: dict[tuple[int, int, int], cp_model.IntVar] = {}
    tie: dict[tuple[int, int], int] = {}
    top: dict[tuple[int, int], int] = {}
    factor = peak_factor(classes, peak_quantile)
    for ci, c in enumerate(classes):
        rate_terms = []
        best_cost = min(c.options[oi].cost for oi in keep[ci])
        for oi in keep[ci]:
            o = c.options[oi]
            # The class's peak if every arrival took this option: a plan mixing options serves
            # the class when its shares of those peaks add up to at least one.
            full = planned_vms(c.arrivals_per_hour * o.seconds / 3600.0, factor)
            count[ci, oi] = model.new_int_var(0, full, f"n{ci}_{oi}")
            top[ci, oi] = full
            for k in range(n_greedy):
                on[ci, oi, k] = model.new_int_var(0, full, f"y{ci}_{oi}_{k}")
            model.add(sum(on[ci, oi, k] for k in range(n_greedy)) == count[ci, oi])
            if full:
                rate_terms.append(-(-RATE_SCALE // full) * count[ci, oi])
            # Extra tenant cost per VM, in tenths of a percent: second to the machine count.
            extra = o.cost / best_cost - 1.0 if best_cost > 0 else 0.0
            tie[ci, oi] = round(1000 * max(0.0, extra))
        if rate_terms and c.arrivals_per_hour > 0:
            model.add(sum(rate_terms) >= RATE_SCALE)
    for k in range(n_greedy):
        for r in range(4):
            terms = [
                _units(classes[ci].options[oi])[r] * v
                for (ci, oi, kk), v in on.items()
                if kk == k and _units(classes[ci].options[oi])[r]
            ]
            if terms:
                model.add(sum(terms) <= cap[r] * used[k])
    in_socket = _socket_constraints(model, classes, kind, fill, on, top, used)
    if kind.pool_bytes:
        pool = int(kind.pool_bytes * fill) // _MIB
        for first in range(0, n_greedy, kind.rack_nodes):
            rack = range(first, min(first + kind.rack_nodes, n_greedy))
            terms = [
                _units(classes[ci].options[oi])[2] * v
                for (ci, oi, kk), v in on.items()
                if kk in rack
            ]
            model.add(sum(terms) <= pool)
    # Greedy's plan as the hint: CP-SAT only has to improve on it.
    placed = {key: 0 for key in on}
    for k, m in enumerate(greedy):
        for ci, oi in m:
            placed[ci, oi, k] += 1
    for key, v in on.items():
        model.add_hint(v, placed[key])
    socket_hints = _socket_hints(classes, kind, fill, greedy)
    for where, z in in_socket.items():
        model.add_hint(z, socket_hints.get(where, 0))
    for (ci, oi), v in count.items():
        model.add_hint(v, sum(placed[ci, oi, k] for k in range(n_greedy)))
    for u in used:
        model.add_hint(u, True)
    # Any plan's tie-break total is below one machine's weight.
    weight = 1 + sum(t * top[key] for key, t in tie.items())
    model.minimize(weight * sum(used) + sum(t * count[key] for key, t in tie.items()))
    solver = cp_model.CpSolver()
    _check_deadline(deadline)
    left = time_limit_seconds if deadline is None else deadline - time.monotonic()
    solver.parameters.max_time_in_seconds = max(0.01, min(time_limit_seconds, left))
    solver.parameters.num_workers = workers
    status = solver.solve(model)
    bound = max(0, math.ceil(solver.best_objective_bound / weight - 1e-9))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _kind_plan(
            classes, kind, price, greedy, n_greedy, "greedy", bound,
            "CP-SAT found no plan within its time limit: greedy's",
        )  # fmt: skip
    content = [
        [(ci, oi) for (ci, oi, kk), v in on.items() if kk == k for _ in range(solver.value(v))]
        for k in range(n_greedy)
        if solver.value(used[k])
    ]
    content = [m for m in content if m]
    if len(content) >= n_greedy:
        return _kind_plan(
            classes, kind, price, greedy, n_greedy, "greedy", bound,
            "CP-SAT found no plan with fewer machines than greedy's within its time limit"
            if status != cp_model.OPTIMAL
            else "greedy's machine count is optimal for these options",
        )  # fmt: skip
    return _kind_plan(
        classes, kind, price, content, n_greedy,
        "optimal" if status == cp_model.OPTIMAL else "feasible", bound, "",
    )  # fmt: skip


def _socket_constraints(
    model: cp_model.CpModel,
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    fill: float,
    on: dict[tuple[int, int, int], cp_model.IntVar],
    top: dict[tuple[int, int], int],
    used: Sequence[cp_model.IntVar],
) -> dict[tuple[int, int, int, int], cp_model.IntVar]:
    """On a machine of several sockets, the VMs of each option on machine k are split over its
    sockets, and each socket's VMs hold at most its ways: a VM's ways are one socket's. One
    socket needs nothing beyond the machine's own constraint on ways."""
    if kind.sockets == 1:
        return {}
    per_socket = _socket_ways(kind, fill)
    split: dict[tuple[int, int, int, int], cp_model.IntVar] = {}
    for (ci, oi, k), v in on.items():
        if not classes[ci].options[oi].llc_ways:
            continue
        parts = []
        for s in range(kind.sockets):
            split[ci, oi, k, s] = model.new_int_var(0, top[ci, oi], f"z{ci}_{oi}_{k}_{s}")
            parts.append(split[ci, oi, k, s])
        model.add(sum(parts) == v)
    for k, u in enumerate(used):
        for s in range(kind.sockets):
            terms = [
                classes[ci].options[oi].llc_ways * z
                for (ci, oi, kk, ss), z in split.items()
                if kk == k and ss == s
            ]
            if terms:
                model.add(sum(terms) <= per_socket * u)
    return split


def _socket_hints(
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    fill: float,
    machines: Sequence[Sequence[tuple[int, int]]],
) -> dict[tuple[int, int, int, int], int]:
    """Greedy's VMs per (class, option, machine, socket): each machine's VMs handed out first
    fit over its sockets in the order greedy placed them, which is how greedy fitted them."""
    if kind.sockets == 1:
        return {}
    out: dict[tuple[int, int, int, int], int] = {}
    for k, m in enumerate(machines):
        free = [_socket_ways(kind, fill)] * kind.sockets
        for ci, oi in m:
            ways = classes[ci].options[oi].llc_ways
            s = next((s for s, w in enumerate(free) if w >= ways), 0)
            free[s] -= ways
            out[ci, oi, k, s] = out.get((ci, oi, k, s), 0) + 1
    return out


def _kind_plan(
    classes: Sequence[WorkloadClass],
    kind: MachineKind,
    price: float,
    content: Sequence[Sequence[tuple[int, int]]],
    n_greedy: int,
    status: str,
    bound: int,
    note: str,
) -> KindPlan:
    vms = {c.name: [0] * len(c.options) for c in classes}
    for m in content:
        for ci, oi in m:
            vms[classes[ci].name][oi] += 1
    # Arrivals per hour given each option: the class's rate shared in proportion to the
    # throughput its VMs at the peak give (VMs / hours held).
    mix: dict[str, list[float]] = {}
    tenant_hour = 0.0
    for c in classes:
        thr = [n * 3600.0 / o.seconds for n, o in zip(vms[c.name], c.options, strict=True)]
        total = sum(thr)
        share = [t / total if total else 0.0 for t in thr]
        mix[c.name] = [c.arrivals_per_hour * s for s in share]
        tenant_hour += sum(x * o.cost for x, o in zip(mix[c.name], c.options, strict=True))
    cap = kind.capacity()
    held = [0.0] * 4
    for c in classes:
        for n, o in zip(vms[c.name], c.options, strict=True):
            for r, d in enumerate(o.demand()):
                held[r] += n * d
    machines = len(content)
    load = {
        RESOURCES[r]: (held[r] / (machines * cap[r]) if machines and cap[r] else 0.0)
        for r in range(4)
    }
    return KindPlan(
        kind=kind.name,
        machines=machines,
        machine_hour=price,
        total_hour=machines * price,
        tenant_hour=tenant_hour,
        load=load,
        mix=mix,
        binding=max(load, key=lambda k: load[k]),
        greedy_machines=n_greedy,
        status=status,
        lower_bound=min(bound, machines),
        vms=vms,
        machines_content=[_tally(classes, m) for m in content],
        note=note,
    )


def _tally(classes: Sequence[WorkloadClass], m: Sequence[tuple[int, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ci, oi in m:
        key = f"{classes[ci].name}#{oi}"
        out[key] = out.get(key, 0) + 1
    return out


def plan_capacity(
    classes: Sequence[WorkloadClass],
    kinds: Sequence[MachineKind],
    prices: PriceProfile,
    *,
    fill: float = DEFAULT_FILL,
    peak_quantile: float = DEFAULT_PEAK_QUANTILE,
    time_limit_seconds: float = 5.0,
    deadline: float | None = None,
) -> CapacityPlan:
    """The cheapest machine kind and count for the mix (ties: fewer machines). CP-SAT gets
    `time_limit_seconds` per kind; `deadline` (time.monotonic()) bounds the whole call."""
    if not kinds:
        raise ValueError("no machine kind to plan for")
    if not 0.1 <= fill <= 1.0:
        raise ValueError("fill lies in [0.1, 1]")
    if not 0.5 <= peak_quantile < 1.0:
        raise ValueError("peak_quantile lies in [0.5, 1)")
    plans = [
        plan_kind(
            classes,
            k,
            prices,
            fill=fill,
            peak_quantile=peak_quantile,
            time_limit_seconds=time_limit_seconds,
            deadline=deadline,
        )
        for k in kinds
    ]
    feasible = [p for p in plans if p.status != "infeasible"]
    if not feasible:
        raise ValueError(_why_no_kind(classes, kinds, fill))
    best = min(feasible, key=lambda p: (p.total_hour, p.machines))
    return CapacityPlan(best=best, kinds=plans, fill=fill, peak_quantile=peak_quantile)


def _why_no_kind(
    classes: Sequence[WorkloadClass], kinds: Sequence[MachineKind], fill: float
) -> str:
    """Why no kind can host the mix. The classes no kind can host at all are named; when every
    class fits some kind on its own, it is the combination that no single kind holds."""
    fitted = {k.name: [on_kind(c, k) for c in classes] for k in kinds}

    def cannot(i: int, k: MachineKind) -> bool:
        f = fitted[k.name][i]
        return bool(f.refused) or not any(_usable(o, k, fill) for o in f.workload.options)

    nowhere = [i for i in range(len(classes)) if all(cannot(i, k) for k in kinds)]
    if nowhere:
        largest = max(kinds, key=lambda k: k.capacity())
        first = fitted[largest.name][nowhere[0]]
        why = first.refused or why_homeless(first.workload, largest, fill)
        return (
            f"no machine kind can host {', '.join(classes[i].name for i in nowhere)}: no option"
            f" of it fits any kind (at fill {fill:g}; on {largest.name}, {why})"
        )
    per_kind = "; ".join(
        f"{k.name}: {', '.join(classes[i].name for i in range(len(classes)) if cannot(i, k))}"
        for k in kinds
    )
    return f"no machine kind can host every class (cannot host: {per_kind})"


def _check_classes(classes: Sequence[WorkloadClass]) -> None:
    if not classes:
        raise ValueError("the mix has no workload class")
    for c in classes:
        if not c.options:
            raise ValueError(f"{c.name}: no option")
        if not (c.arrivals_per_hour >= 0 and math.isfinite(c.arrivals_per_hour)):
            raise ValueError(f"{c.name}: arrivals per hour must be finite and not negative")
        for o in c.options:
            if o.seconds <= 0 or not math.isfinite(o.seconds) or o.cost < 0:
                raise ValueError(f"{c.name}: an option's seconds or cost is out of range")
        host = c.measured_on
        if host is not None:
            if host.llc_ways < 1 or (host.llc_size_bytes is not None and host.llc_size_bytes < 1):
                raise ValueError(f"{c.name}: the measuring host's LLC is out of range")
            if any(o.llc_ways > host.llc_ways for o in c.options):
                raise ValueError(
                    f"{c.name}: an option has more ways than the {host.llc_ways} of the host it"
                    " was measured on"
                )


def _check_kind(kind: MachineKind) -> None:
    if kind.sockets < 1 or kind.llc_ways < 1:
        raise ValueError(f"{kind.name}: a machine has at least one socket of at least one way")
    if kind.llc_size_bytes is not None and kind.llc_size_bytes < 1:
        raise ValueError(f"{kind.name}: llc_size_bytes is positive")
