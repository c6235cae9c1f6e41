"""Machine kinds with sockets, a sized LLC per socket and a slow tier's technology, and a
profile's ways carried over to a kind with another cache (model/capacity.py `on_kind`,
model/planning_requests.py `KindIn`, `ClassIn.measured_on`)."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from model.capacity import (
    MachineKind,
    Option,
    ProfileHost,
    WorkloadClass,
    on_kind,
    paper_machine_kinds,
    peak_factor,
    plan_capacity,
    plan_kind,
    planned_vms,
    rescaled_ways,
)
from model.errors import InvalidRequest
from model.planning_requests import (
    CapacityIn,
    ClassIn,
    KindIn,
    ShadowPricesIn,
    capacity_plan,
    shadow_price_plan,
)
from model.pricing import DEFAULT_PRICE_PROFILE
from model.resources import GIB

HOUR = 3600.0
MIB = 1 << 20
# A 48-way host of 48 MiB: a way is 1 MiB. A 15-way kind of 45 MiB: a way is 3 MiB.
HOST = ProfileHost(llc_ways=48, llc_size_bytes=48 * MIB, slow_tier="optane")
KIND15 = MachineKind(
    "15w", cpus=64, dram_bytes=256 * GIB, llc_ways=15, llc_size_bytes=45 * MIB, slow_tier="optane"
)


def _one(ways: int, host: ProfileHost | None = HOST, rate: float = 30) -> WorkloadClass:
    return WorkloadClass("w", rate, (Option(1, GIB, 0, ways, HOUR, 1.0),), host)


def test_ways_are_rescaled_by_bytes_of_cache_rounded_up() -> None:
    # 12 MiB of cache: 4 ways of 3 MiB; 13 MiB needs 5 (never less cache than measured).
    assert rescaled_ways(12, HOST, 15, 45 * MIB) == 4
    assert rescaled_ways(13, HOST, 15, 45 * MIB) == 5
    assert rescaled_ways(1, HOST, 15, 45 * MIB) == 1
    # Onto a larger cache of more, smaller ways: 12 MiB in ways of 0.5 MiB.
    assert rescaled_ways(12, HOST, 64, 32 * MIB) == 24
    with pytest.raises(ValueError, match="unknown"):
        rescaled_ways(12, ProfileHost(48), 15, 45 * MIB)


def test_a_profile_from_a_48_way_host_is_planned_in_the_kinds_ways_and_says_so() -> None:
    plan = plan_kind([_one(12)], KIND15, DEFAULT_PRICE_PROFILE)
    assert plan.status != "infeasible"
    assert plan.option_ways == {"w": [4]}
    assert plan.reasons == ["w: rescaled from 12 of 48 ways (12 MiB) to 4 of 15 ways"]
    # Ways bind: three VMs of 4 ways on a 15-way machine (64 CPUs, 256 GiB are plenty). Planned
    # with the profile's 12 ways, one VM per machine would not even fit.
    peak = planned_vms(30.0, peak_factor([_one(12)], 0.95))
    assert plan.machines == math.ceil(peak / 3) and plan.binding == "llc"
    assert all(sum(m.values()) <= 3 for m in plan.machines_content)


def test_the_same_cache_or_no_sizes_at_the_same_way_count_changes_nothing() -> None:
    same = MachineKind("48w", llc_ways=48, llc_size_bytes=48 * MIB, slow_tier="optane")
    assert on_kind(_one(12), same).workload.options[0].llc_ways == 12
    assert on_kind(_one(12), same).reasons == ()
    unsized = MachineKind("48w-old")  # an old kinds file: 48 ways, no size, no slow tier
    assert on_kind(_one(12), unsized).workload == _one(12)
    assert on_kind(_one(12), unsized).reasons == () and not on_kind(_one(12), unsized).refused
    # No host: the options' ways are taken as the kind's, as before.
    assert on_kind(_one(12, host=None), KIND15).workload == _one(12, host=None)


def test_the_same_way_count_of_another_size_is_rescaled() -> None:
    bigger = MachineKind("48w-96M", llc_ways=48, llc_size_bytes=96 * MIB)
    fitted = on_kind(_one(12), bigger)
    assert fitted.workload.options[0].llc_ways == 6
    assert fitted.reasons == ("w: rescaled from 12 of 48 ways (12 MiB) to 6 of 48 ways",)


def test_an_unknown_size_refuses_the_class_on_the_kind_with_the_reason() -> None:
    no_size = MachineKind("15w-unsized", cpus=64, llc_ways=15)
    plan = plan_kind([_one(12)], no_size, DEFAULT_PRICE_PROFILE)
    assert plan.status == "infeasible" and plan.machines == -1
    assert "w: refused: this kind's LLC size is unknown (llc_size_bytes" in plan.note
    unknown_host = _one(12, host=ProfileHost(llc_ways=48))
    plan = plan_kind([unknown_host], KIND15, DEFAULT_PRICE_PROFILE)
    assert plan.status == "infeasible"
    assert plan.note.startswith("w: refused: the profile's host LLC size is unknown")
    # Planned on kinds that all refuse it, the plan is refused and names why.
    with pytest.raises(ValueError, match=r"no machine kind can host w: .*host LLC size is unknown"):
        plan_capacity([unknown_host], [KIND15], DEFAULT_PRICE_PROFILE)
    # Another kind that can take it is planned; the refusing one stays in the answer.
    plan_all = plan_capacity([_one(12)], [no_size, KIND15], DEFAULT_PRICE_PROFILE)
    assert plan_all.best.kind == "15w"
    assert next(k for k in plan_all.kinds if k.kind == "15w-unsized").status == "infeasible"


def test_an_option_needing_more_ways_than_a_socket_has_is_refused_with_the_reason() -> None:
    small = MachineKind("15w-30M", cpus=64, dram_bytes=256 * GIB, llc_ways=15,
                        llc_size_bytes=30 * MIB)  # fmt: skip
    wide_and_narrow = WorkloadClass(
        "w",
        30,
        (Option(1, GIB, 0, 40, HOUR, 1.0), Option(1, GIB, 0, 8, HOUR, 1.1)),
        HOST,
    )
    plan = plan_kind([wide_and_narrow], small, DEFAULT_PRICE_PROFILE)
    # 40 MiB in ways of 2 MiB is 20 ways, more than 15: only the 8-way option (4 ways) is packed.
    assert plan.option_ways == {"w": [20, 4]}
    assert "w: rescaled from 8 of 48 ways (8 MiB) to 4 of 15 ways, 40 of 48 ways" in plan.reasons[0]
    assert plan.reasons[1] == (
        "w: refused the option(s) of 40 of 48 ways: as many bytes need 20 or more ways, and a"
        " socket of this kind has 15"
    )
    assert plan.status != "infeasible" and plan.vms["w"][0] == 0 and plan.vms["w"][1] > 0
    only_wide = WorkloadClass("w", 30, (Option(1, GIB, 0, 40, HOUR, 1.0),), HOST)
    refused = plan_kind([only_wide], small, DEFAULT_PRICE_PROFILE)
    assert refused.status == "infeasible"
    assert "at least 20 LLC ways (a machine offers 15)" in refused.note


def test_a_vm_gets_ways_of_one_socket_while_a_machine_packs_all_its_sockets() -> None:
    one = MachineKind("1s", cpus=64, dram_bytes=256 * GIB, llc_ways=8)
    two = MachineKind("2s", cpus=64, dram_bytes=256 * GIB, llc_ways=8, sockets=2)
    assert two.capacity()[3] == 16 and two.total_llc_ways == 16
    # A machine's ways are priced over its sockets.
    assert two.hourly_price(DEFAULT_PRICE_PROFILE) - one.hourly_price(
        DEFAULT_PRICE_PROFILE
    ) == pytest.approx(8 * DEFAULT_PRICE_PROFILE.llc_way_hour)
    four_ways = [WorkloadClass("w", 30, (Option(1, GIB, 0, 4, HOUR, 1.0),))]
    p1 = plan_kind(four_ways, one, DEFAULT_PRICE_PROFILE)
    p2 = plan_kind(four_ways, two, DEFAULT_PRICE_PROFILE)
    assert p2.machines == math.ceil(p1.machines / 2)  # two VMs per machine, four with 2 sockets
    # Ten ways fit the machine's 16 in all, but no socket's 8: the kind cannot host it.
    ten = [WorkloadClass("t", 1, (Option(1, GIB, 0, 10, HOUR, 1.0),))]
    refused = plan_kind(ten, two, DEFAULT_PRICE_PROFILE)
    assert refused.status == "infeasible"
    assert "at least 10 LLC ways (a socket offers 8)" in refused.note
    with pytest.raises(ValueError, match=r"on 2s, t's 1 option\(s\) need at least 10 LLC ways"):
        plan_capacity(ten, [one, two], DEFAULT_PRICE_PROFILE)


def _fits_sockets(content: dict[str, int], ways: dict[str, int], sockets: int, per: int) -> bool:
    """Whether a machine's VMs (by "class#option") can be split over its sockets, each
    socket's VMs within its ways: every split of the counts is tried."""
    keys = list(content)

    def split(i: int, free: list[int]) -> bool:
        if i == len(keys):
            return True
        n, w = content[keys[i]], ways[keys[i]]

        def place(left: int, s: int, free: list[int]) -> bool:
            if s == len(free) - 1:
                return left * w <= free[s] and split(i + 1, [*free[:s], free[s] - left * w])
            return any(
                place(left - x, s + 1, [*free[:s], free[s] - x * w, *free[s + 1 :]])
                for x in range(min(left, free[s] // w) + 1)
            )

        return place(n, 0, free)

    return split(0, [per] * sockets)


def test_each_socket_holds_its_vms_ways_in_greedy_and_cp_sat() -> None:
    """Two sockets of 15 ways: VMs of 4 ways go three to a socket (six a machine, not the seven
    that 30 ways in all would take); with a 3-way option beside it, four to a socket."""
    two = MachineKind("2s", cpus=64, dram_bytes=256 * GIB, llc_ways=15, sockets=2)
    four = [WorkloadClass("w", 30, (Option(1, GIB, 0, 4, HOUR, 1.0),))]
    plan = plan_kind(four, two, DEFAULT_PRICE_PROFILE)
    peak = planned_vms(30.0, peak_factor(four, 0.95))
    assert (
        plan.machines == math.ceil(peak / 6)
        and max(sum(m.values()) for m in plan.machines_content) == 6
    )
    mixed = [
        WorkloadClass("w", 60, (Option(1, GIB, 0, 4, HOUR, 1.0), Option(1, GIB, 0, 3, HOUR, 1.001)))
    ]
    plan = plan_kind(mixed, two, DEFAULT_PRICE_PROFILE, time_limit_seconds=5.0)
    assert plan.machines < plan.greedy_machines and plan.status in ("optimal", "feasible")
    ways = {"w#0": 4, "w#1": 3}
    assert all(_fits_sockets(m, ways, 2, 15) for m in plan.machines_content)
    # The checker refuses what 30 ways in all would take but two sockets cannot.
    assert not _fits_sockets({"w#0": 7}, ways, 2, 15)
    assert _fits_sockets({"w#0": 6, "w#1": 2}, ways, 2, 15)


def test_another_slow_tier_is_said_not_refused() -> None:
    pooled = MachineKind("cxl", pool_bytes=512 * GIB, local_slow_bytes=0, slow_tier="cxl_pool",
                         llc_size_bytes=48 * MIB)  # fmt: skip
    plan = plan_kind([_one(12)], pooled, DEFAULT_PRICE_PROFILE)
    assert plan.status != "infeasible"
    assert plan.reasons == [
        "w: measured with optane slow memory, this kind has cxl_pool: its times and costs assume"
        " the measured slow tier's latency"
    ]
    unstated = MachineKind("cxl?", pool_bytes=512 * GIB, local_slow_bytes=0)
    assert plan_kind([_one(12)], unstated, DEFAULT_PRICE_PROFILE).reasons == []
    dram_only = MachineKind("dram", local_slow_bytes=0, slow_tier="none")
    assert plan_kind([_one(12)], dram_only, DEFAULT_PRICE_PROFILE).reasons == []


def test_the_papers_kinds_state_their_cache_and_slow_tier() -> None:
    kinds = {k.name: k for k in paper_machine_kinds()}
    assert kinds["24G-128L"].slow_tier == "optane" and kinds["48G-384P"].slow_tier == "cxl_pool"
    assert all(k.llc_size_bytes == 12 * MIB and k.sockets == 1 for k in kinds.values())


def test_an_old_kinds_file_reads_with_the_defaults() -> None:
    old = {"name": "k", "cpus": 12, "dram_bytes": 24 * GIB, "local_slow_bytes": 0, "llc_ways": 48}
    kind = KindIn.model_validate_json(json.dumps(old)).machine_kind()
    assert kind == MachineKind("k", 12, 24 * GIB, 0, 0, 8, 48, 1, None, None)
    new = {**old, "sockets": 2, "llc_ways": 15, "llc_size_bytes": "30MiB", "slow_tier": "none"}
    kind = KindIn.model_validate(new).machine_kind()
    assert (kind.sockets, kind.llc_ways, kind.llc_size_bytes, kind.slow_tier) == (
        2,
        15,
        30 * MIB,
        "none",
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"sockets": -1}, "sockets"),
        ({"sockets": 0}, "sockets"),
        ({"sockets": 10**30}, "sockets"),
        ({"llc_ways": 10**30}, "llc_ways"),
        ({"llc_size_bytes": 0}, "llc_size_bytes"),
        ({"llc_size_bytes": "1PiB"}, "llc_size_bytes"),
        ({"slow_tier": "dram"}, "slow_tier"),
        ({"slow_tier": "none", "local_slow_bytes": GIB}, "slow_tier none has slow memory"),
        ({"slow_tier": "cxl_pool", "local_slow_bytes": GIB}, "slow_tier cxl_pool needs pool_bytes"),
        ({"slow_tier": "optane", "pool_bytes": GIB}, "slow_tier optane is local"),
    ],
)
def test_a_bad_kind_is_refused_naming_the_field(change: dict[str, object], says: str) -> None:
    base = {"name": "k", "cpus": 12, "dram_bytes": 24 * GIB, "local_slow_bytes": 0, "llc_ways": 15}
    with pytest.raises(ValidationError, match=says):
        KindIn.model_validate({**base, **change})


def test_a_class_measured_on_a_host_is_bounded_by_its_ways_and_planned_through_the_request() -> (
    None
):
    option = {"vcpus": 1, "dram_bytes": GIB, "slow_bytes": 0, "llc_ways": 12, "seconds": HOUR,
              "cost": 1.0}  # fmt: skip
    with pytest.raises(ValidationError, match="more ways than the 8 of measured_on"):
        ClassIn.model_validate(
            {
                "name": "w",
                "arrivals_per_hour": 1,
                "options": [option],
                "measured_on": {"llc_ways": 8},
            }
        )
    with pytest.raises(ValidationError, match="slow_tier"):
        ClassIn.model_validate(
            {
                "name": "w",
                "arrivals_per_hour": 1,
                "options": [option],
                "measured_on": {"llc_ways": 48, "slow_tier": "none"},
            }
        )
    body = CapacityIn.model_validate(
        {
            "classes": [
                {
                    "name": "w",
                    "arrivals_per_hour": 30,
                    "options": [option],
                    "measured_on": {"llc_ways": 48, "llc_size_bytes": "48MiB"},
                }
            ],
            "kinds": [
                {"name": "15w", "cpus": 64, "dram_bytes": "256GiB", "llc_ways": 15,
                 "llc_size_bytes": "45MiB"},
                {"name": "15w-unsized", "cpus": 64, "dram_bytes": "256GiB", "llc_ways": 15},
            ],
        }
    )  # fmt: skip
    out = capacity_plan(body)
    by_kind = {k["kind"]: k for k in out["kinds"]}
    assert by_kind["15w"]["option_ways"] == {"w": [4]}
    assert by_kind["15w"]["reasons"] == ["w: rescaled from 12 of 48 ways (12 MiB) to 4 of 15 ways"]
    assert "refused: this kind's LLC size is unknown" in by_kind["15w-unsized"]["note"]
    # The answer's options stay the profile's; each kind's own ways are under option_ways.
    assert out["options"]["w"][0]["llc_ways"] == 12


def test_shadow_prices_price_a_profiles_options_in_the_kinds_ways() -> None:
    option = {"vcpus": 1, "dram_bytes": GIB, "slow_bytes": 0, "llc_ways": 12, "seconds": HOUR,
              "cost": 1.0}  # fmt: skip
    mix = {
        "name": "w",
        "arrivals_per_hour": 30,
        "options": [option],
        "measured_on": {"llc_ways": 48, "llc_size_bytes": "48MiB"},
    }
    kind = {"name": "15w", "cpus": 64, "dram_bytes": "256GiB", "llc_ways": 15}
    sized = ShadowPricesIn.model_validate(
        {"classes": [mix], "kind": {**kind, "llc_size_bytes": "45MiB"}}
    )
    out = shadow_price_plan(sized)
    # 30 VMs at once of 4 ways (not 12) in machines of 15 ways: 8 machines, ways binding.
    assert out["machines"] == pytest.approx(8.0) and out["binding"] == ["llc"]
    assert out["reasons"] == ["w: rescaled from 12 of 48 ways (12 MiB) to 4 of 15 ways"]
    unsized = ShadowPricesIn.model_validate({"classes": [mix], "kind": kind})
    with pytest.raises(InvalidRequest, match="refused: this kind's LLC size is unknown"):
        shadow_price_plan(unsized)
