"""Shadow prices from the LP relaxation of a cluster's packing (model/shadow_prices.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.capacity import MachineKind, Option, WorkloadClass
from model.errors import InvalidRequest
from model.price_profiles import price_profile
from model.resources import GIB
from model.shadow_prices import shadow_prices

KIND = MachineKind(name="m", cpus=12, dram_bytes=24 * GIB, local_slow_bytes=128 * GIB, llc_ways=48)
PRICES = price_profile("gce-n1", llc_area_share=0.03)


def _option(vcpus: int, dram_gib: float, ways: int, seconds: float = 3600.0) -> Option:
    return Option(
        vcpus=vcpus,
        dram_bytes=int(dram_gib * GIB),
        slow_bytes=0,
        llc_ways=ways,
        seconds=seconds,
        cost=1.0,
    )


def test_the_resource_a_cluster_is_short_of_gets_the_whole_machine_price() -> None:
    # Two vCPUs and 28 ways per VM: 48 / 28 = 1.7 VMs per machine by ways against 6 by cores
    # and 12 by DRAM, so ways bind alone.
    hogs = WorkloadClass("hog", 10.0, (_option(2, 2.0, 28),))
    sp = shadow_prices([hogs], KIND, PRICES)
    assert sp.binding == ("llc",)
    assert sp.machines == pytest.approx(10.0 * 28 / 48)
    shadow = sp.shadow_profile()
    assert shadow.vcpu_hour == 0.0 and shadow.dram_gib_hour == 0.0
    # a machine costs the same in both currencies
    assert KIND.hourly_price(shadow) == pytest.approx(KIND.hourly_price(PRICES))
    assert shadow.llc_way_hour == pytest.approx(KIND.hourly_price(PRICES) / 48)


def test_a_class_that_can_shift_load_prices_both_resources() -> None:
    # One class may take many ways or much DRAM; another only cores. The LP splits the first
    # class so that neither ways nor DRAM is left idle: both get a price.
    flexible = WorkloadClass("flex", 20.0, (_option(1, 1.0, 24), _option(1, 8.0, 2)))
    plain = WorkloadClass("plain", 10.0, (_option(1, 1.0, 1),))
    sp = shadow_prices([flexible, plain], KIND, PRICES)
    assert set(sp.binding) == {"dram", "llc"}
    mu = sp.per_unit
    assert mu[1] * KIND.dram_bytes + mu[3] * KIND.llc_ways == pytest.approx(1.0)


def test_currencies_and_their_blend() -> None:
    sp = shadow_prices([WorkloadClass("hog", 10.0, (_option(2, 2.0, 28),))], KIND, PRICES)
    assert sp.currency("list") == PRICES
    half = sp.currency("blend")
    shadow = sp.currency("shadow")
    assert half.llc_way_hour == pytest.approx((PRICES.llc_way_hour + shadow.llc_way_hour) / 2)
    assert half.vcpu_hour == pytest.approx(PRICES.vcpu_hour / 2)
    assert sp.currency("blend", 0.0).vcpu_hour == pytest.approx(PRICES.vcpu_hour)
    with pytest.raises(InvalidRequest, match="blend"):
        sp.currency("blend", 1.5)


def test_a_cluster_without_arrivals_has_no_prices_to_read() -> None:
    with pytest.raises(InvalidRequest, match="classes"):
        shadow_prices([WorkloadClass("idle", 0.0, (_option(1, 1.0, 1),))], KIND, PRICES)


EXTREMES = st.sampled_from([5e-324, 2.2250738585072014e-308, 1e-300, 1e-5, 1.0, 3600.0, 1e9])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(EXTREMES, st.floats(0.0, 1e7)),
            st.lists(
                st.tuples(
                    st.integers(1, 1024),
                    st.integers(0, 1 << 44),
                    st.integers(0, 1 << 44),
                    st.integers(1, 64),
                    st.one_of(EXTREMES, st.floats(1e-300, 1e9)),
                ),
                min_size=1,
                max_size=4,
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_bounded_mix_gets_finite_prices_or_a_clear_refusal(
    mix: list[tuple[float, list[tuple[int, int, int, int, float]]]],
) -> None:
    classes = [
        WorkloadClass(
            f"c{i}",
            rate,
            tuple(
                Option(vcpus=v, dram_bytes=d, slow_bytes=sl, llc_ways=w, seconds=sec, cost=1.0)
                for v, d, sl, w, sec in options
            ),
        )
        for i, (rate, options) in enumerate(mix)
    ]
    try:
        sp = shadow_prices(classes, KIND, PRICES)
    except InvalidRequest as exc:
        assert exc.problems[0].field == "classes"
        return
    assert math.isfinite(sp.machines) and sp.machines >= 0
    assert all(math.isfinite(x) and x >= 0 for x in sp.per_unit)
    for currency in ("list", "shadow", "blend"):
        assert math.isfinite(KIND.hourly_price(sp.currency(currency)))
