"""Priced with the vCPUs it is deployed with, judged by the simulator's ground truth: memcached
profiled on four vCPUs and deployed as a VM of one vCPU and 2 GiB."""

from __future__ import annotations

from bench.deployed_vcpus import judge
from model.objectives import DEFAULT_THRESHOLD
from model.resources import GIB


def test_priced_with_the_deployed_vcpus_the_pick_is_the_truly_cheapest() -> None:
    j = judge("memcached", vcpus=1, per_vcpu=2 * GIB)
    assert j.profile_vcpus == 4
    # With four vCPUs' price every second weighs four times as much: all-DRAM, more than T over
    # in truth; with the one it runs on, the slow memory that truly pays.
    assert j.over_at_profile > DEFAULT_THRESHOLD
    assert j.pick_at_deployed == j.truly_cheapest and j.over_at_deployed == 0.0
