"""The load benchmarks on the harness, at smoke sizes: each prints what it printed and writes
the same figures with --json (benchmarks that need the control plane or a container runtime are
checked through the functions that record their figures)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import (
    dra_objects,
    feeder_events,
    fleet,
    placement_size,
    publisher_refresh,
    recommend_latency,
    scheduler_e2e,
)
from bench.harness import Result, check_result
from bench.report_tables import main as render_main
from model.node_contract import is_tiered_pod
from tests.scheduler.controlplane.cluster import opted_in_pod

ROOT = Path(__file__).resolve().parents[2]


def result_of(path: Path) -> dict[str, Any]:
    return check_result(json.loads(path.read_text()))


def test_recommend_latency_writes_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latency.json"
    recommend_latency.main(
        ["--quick", "--profile", str(ROOT / "examples" / "graph500.json"), "--json", str(out)]
    )
    printed = capsys.readouterr().out
    doc = result_of(out)
    assert doc["benchmark"] == "recommend_latency"
    assert doc["parameters"]["calls"] == 50 and doc["parameters"]["workload"] == "graph500"
    figures = doc["figures"]
    assert set(figures) == {"paper-77 (77 points), graph500", "host-11x48 (528 points), graph500"}
    paper = figures["paper-77 (77 points), graph500"]
    assert paper["target ms"] == 1.0 and paper["recommend n"] == 50
    assert 0 < paper["recommend p50 ms"] <= paper["recommend p99 ms"]
    # The printed line and the JSON are the same figures.
    assert f"recommend: median {paper['recommend p50 ms']:.3f} ms" in printed
    assert f"choose only: median {paper['choose p50 ms']:.3f} ms" in printed


def test_publisher_refresh_writes_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "refresh.json"
    publisher_refresh.main(["--pairs", "300", "--json", str(out)])
    doc = result_of(out)
    decisions = [row["decisions"] for row in doc["figures"].values()]
    assert decisions == [0, 3, 300]  # nothing changed, 1 % of the workloads, every pair
    assert "300 pairs asked for, 300 decisions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        publisher_refresh.main(["--pairs", "0"])


@pytest.mark.slow
def test_feeder_events_writes_its_figures_on_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "feeder.json"
    feeder_events.main(["--pods", "10", "--nodes", "3", "--repeat", "1", "--json", str(out)])
    doc = result_of(out)
    row = doc["figures"]["this tree"]
    assert row["both ms CPU/tiered pod"] > 0 and row["PostgreSQL ms/tiered pod"] >= 0
    assert doc["parameters"] == {"pods": 10, "nodes": 3, "rounds": 1, "batch": 1000}
    # The feeder watches tmc's pods only: the ten plain pods' events are never sent, the ten
    # tiered pods' five each are.
    assert "this tree: 50 events sent, watch" in capsys.readouterr().out


@pytest.mark.slow
def test_placement_size_measures_both_placements_on_the_api_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "placement-size.json"
    placement_size.main(["--rounds", "1", "--pods", "3", "--watchers", "1", "--json", str(out)])
    doc = result_of(out)
    carried, named = doc["figures"]["v2-plan"], doc["figures"]["v3-plan-from"]
    # The plan named, not carried: a smaller annotation, each arm measured on the API server.
    assert named["placement bytes"] < carried["placement bytes"] - 150
    assert carried["median ms/pod"] > 0 and named["median ms/pod"] > 0
    assert doc["ratios"]["v3-plan-from"]["ratio to v2"] == pytest.approx(
        named["median ms/pod"] / carried["median ms/pod"], abs=0.01
    )
    assert "median of the rounds' paired ratios v3 / v2" in capsys.readouterr().out


def test_the_fleets_figures_sit_side_by_side_with_their_ratios(tmp_path: Path) -> None:
    result = Result("fleet", {})
    for nodes, p99, wall in ((20, 0.004, 0.5), (40, 0.010, 2.0)):
        run = fleet.FleetRun(
            generated_seconds=1.0,
            database_bytes=nodes * 2**20,
            requests={"GET /metrics": fleet.Timing(0.002, p99)},
            steps={"mirror, 5 pods bound": fleet.Step(cpu=0.1, wall=wall, what="")},
        )
        fleet.record(result, fleet.Fleet(nodes, 1, 1, 1), run)
    result.compare(
        "GET /metrics", "40 nodes p99 ms", "GET /metrics", against_column="20 nodes p99 ms"
    )
    doc = result.write(tmp_path / "fleet.json")
    assert doc["figures"]["GET /metrics"] == {
        "20 nodes p50 ms": 2.0,
        "20 nodes p99 ms": 4.0,
        "40 nodes p50 ms": 2.0,
        "40 nodes p99 ms": 10.0,
    }
    assert doc["figures"]["database"]["40 nodes MiB"] == 40
    assert doc["figures"]["mirror, 5 pods bound"]["40 nodes wall s"] == 2.0
    assert doc["ratios"]["GET /metrics"] == {"40 nodes p99 ms / GET /metrics": 2.5}


def test_scheduler_e2e_records_each_path_against_stock() -> None:
    result = Result("scheduler_e2e", {})
    meter = scheduler_e2e.CpuMeter({"bench": os.getpid()})
    meter.line(10)
    runs = {
        "stock": (scheduler_e2e.Burst(100.0, 0.050, 0.200, 0), meter),
        "plugin": (scheduler_e2e.Burst(90.0, 0.060, 0.300, 1), meter),
    }
    scheduler_e2e.record_size(result, "100 nodes", runs, (0.5, 0.7))
    plugin = result.figures["100 nodes, plugin"]
    assert plugin["pods/s"] == 90.0 and plugin["median ms"] == 60 and plugin["p99 ms"] == 300
    assert "bench CPU ms/pod" in plugin and plugin["load at start, end"] == "0.5, 0.7"
    assert result.ratios["100 nodes, plugin"] == {
        "ratio pods/s": 0.9,
        "ratio median": 1.2,
        "ratio p99": 1.5,
    }
    assert "100 nodes, stock" not in result.ratios


def test_scheduler_e2e_judges_a_series_by_its_medians() -> None:
    result = Result("scheduler_e2e", {})
    runs = [
        {"plugin pods/s": 0.80, "plugin median": 1.9, "plan named pods/s / plugin": 1.01},
        {"plugin pods/s": 1.02, "plugin median": 1.2, "plan named pods/s / plugin": 0.97},
        {"plugin pods/s": 0.96, "plugin median": 1.4, "plan named pods/s / plugin": 0.99},
    ]
    lines = scheduler_e2e.series_medians(5000, runs, result)
    assert lines[0] == "5000 nodes, medians of 3 runs:"
    assert lines[1].startswith("  plugin pods/s / stock ")
    assert "median 0.96  (runs: 0.80, 0.96, 1.02)" in lines[1]
    assert "median 1.40  (runs: 1.20, 1.40, 1.90)" in lines[2]
    # A ratio to another burst than stock's says so, and is not called one to stock.
    assert lines[3].startswith("  plan named pods/s / plugin ") and "stock" not in lines[3]
    assert result.figures["5000 nodes, median of 3"] == {
        "plugin pods/s": 0.96,
        "plugin median": 1.4,
        "plan named pods/s / plugin": 0.99,
    }


def allocated(name: str, *results: tuple[str, str, dict[str, str]]) -> dict[str, Any]:
    """A claim allocated (pool, device, capacity consumed) as kube-scheduler writes it."""
    return {
        "metadata": {"name": name, "namespace": "dra"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": "tmc.dev", "pool": pool, "device": device}
                        | ({"consumedCapacity": taken} if taken else {})
                        for pool, device, taken in results
                    ]
                }
            }
        },
    }


def test_the_dra_over_commit_check_finds_ways_and_bytes_over_a_device() -> None:
    capacity = {
        ("n0", "ways", "ways"): 48,
        ("n1", "ways", "ways"): 48,
        ("n0", "dram", "bytes"): 4 * 2**30,
        ("rack-pool/rack-0", "slow", "bytes"): 2**30,
    }
    fine = [
        allocated("a", ("n0", "ways", {"ways": "28"}), ("n0", "dram", {"bytes": "2Gi"})),
        allocated("b", ("n0", "ways", {"ways": "20"}), ("n0", "dram", {"bytes": "2Gi"})),
        # The same count on another node is another node's ways.
        allocated(
            "c", ("n1", "ways", {"ways": "28"}), ("rack-pool/rack-0", "slow", {"bytes": "1Gi"})
        ),
    ]
    assert dra_objects.overcommit(fine, capacity) == []
    # One way more than n0 has, and a whole device taken with no consumed capacity.
    more = allocated("d", ("n0", "ways", {"ways": "1"}), ("n1", "ways", {}))
    assert dra_objects.overcommit([*fine, more], capacity) == [
        "n1/ways: dra/d took it with no consumed capacity",
        "n0/ways: 49 ways taken of 48",
    ]
    over = allocated("e", ("n0", "dram", {"bytes": "1Mi"}), ("n2", "dram", {"bytes": "1Mi"}))
    assert dra_objects.overcommit([*fine, over], capacity) == [
        f"n0/dram: {4 * 2**30 + 2**20} bytes taken of {4 * 2**30}",
        f"n2/dram: {2**20} bytes taken from an unknown device",
    ]
    pending = {"metadata": {"name": "f", "namespace": "dra"}, "status": {}}
    assert dra_objects.overcommit([pending], capacity) == ["dra/f: not allocated"]


def test_the_plain_dra_shape_finds_a_device_given_twice() -> None:
    classes, slices = dra_objects.plain_objects(["n0", "n1"])
    assert [d["metadata"]["name"] for d in classes] == [dra_objects.PLAIN_CLASS]
    assert [(s["spec"]["nodeName"], len(s["spec"]["devices"])) for s in slices] == [
        ("n0", dra_objects.PLAIN_DEVICES_PER_NODE),
        ("n1", dra_objects.PLAIN_DEVICES_PER_NODE),
    ]
    # Whole devices: no capacity, so the over-commit check by capacity knows none of them.
    assert dra_objects.device_capacity(slices) == {}
    request = dra_objects.plain_claim().spec["devices"]["requests"][0]["exactly"]
    assert (request["deviceClassName"], request["count"]) == (dra_objects.PLAIN_CLASS, 1)
    fine = [allocated("a", ("n0", "device-0", {})), allocated("b", ("n0", "device-1", {}))]
    assert dra_objects.allocated_twice(fine) == []
    twice = allocated("c", ("n0", "device-1", {}))
    pending = {"metadata": {"name": "d", "namespace": "dra"}, "status": {}}
    assert dra_objects.allocated_twice([*fine, twice, pending]) == [
        "n0/device-1: given to dra/b and dra/c",
        "dra/d: not allocated",
    ]


def test_the_dra_path_reads_device_capacity_from_the_slices() -> None:
    slices: list[dict[str, Any]] = [
        {
            "spec": {
                "pool": {"name": "n0"},
                "devices": [
                    {"name": "ways", "capacity": {"ways": {"value": "48"}}},
                    {"name": "dram", "capacity": {"bytes": {"value": "64Gi"}}},
                    {"name": "other"},
                ],
            }
        },
    ]
    assert dra_objects.device_capacity(slices) == {
        ("n0", "ways", "ways"): 48,
        ("n0", "dram", "bytes"): 64 * 2**30,
    }


def test_the_dra_path_sends_tmc_dra_slices_whole_rack_pools_within_its_input_bound() -> None:
    nodes = [(scheduler_e2e.node_name(i), scheduler_e2e.node_capacity(i)) for i in range(2)]
    given = dra_objects.slices_input(nodes)
    assert set(given) == {"nodes", "generation"}
    assert given["nodes"][1] == {
        "name": "n00001",
        "capacity": {
            "host_kind": "bench",
            "cpus": 12,
            "dram_bytes": 64 * 2**30,
            "slow_bytes": 0,
            "llc_ways": 48,
            "slow_pool": "rack-0",
            "slow_pool_bytes": 2**40,
        },
    }
    # A rack pool holds node indices [64k, 64k + 64): a chunk never splits one.
    assert dra_objects.NODES_PER_CALL % 64 == 0
    chunk = [(scheduler_e2e.node_name(i), scheduler_e2e.node_capacity(i)) for i in range(640)]
    assert len(json.dumps(dra_objects.slices_input(chunk))) < 2**20


def test_the_dra_path_turns_off_only_the_dra_filters_timeout(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: plain\n"
    )
    cfg = yaml.safe_load(scheduler_e2e.dra_config(plain).read_text())
    assert cfg["profiles"] == [
        {
            "schedulerName": "plain",
            "pluginConfig": [
                {
                    "name": "DynamicResources",
                    "args": {
                        "apiVersion": "kubescheduler.config.k8s.io/v1",
                        "kind": "DynamicResourcesArgs",
                        "filterTimeout": "0s",
                    },
                }
            ],
        }
    ]


def test_a_dra_pod_names_its_claim() -> None:
    body = scheduler_e2e.without_opt_in(opted_in_pod("p0", "graph500"))
    pod = dra_objects.with_claim(body, "p0")
    assert pod["spec"]["resourceClaims"] == [{"name": "tiers", "resourceClaimName": "p0"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "tiers"}]
    assert pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "1Gi"
    assert "resourceClaims" not in body["spec"]
    assert "claims" not in body["spec"]["containers"][0]["resources"]


def test_the_guard_floors_pod_carries_the_label_and_nothing_else_of_tmcs() -> None:
    """The guard's path is the stock path's pod plus the label the admission policies select
    on: no opt-in request, the stock profile, and the body it was made from left alone."""
    tiered = opted_in_pod("p0", "graph500")
    body = scheduler_e2e.labelled_only(tiered)
    assert is_tiered_pod(body["metadata"]["labels"])
    assert body["spec"]["schedulerName"] == "plain"
    for container in body["spec"]["containers"]:
        for kind in ("requests", "limits"):
            assert "tmc.dev/tiered" not in container["resources"][kind]
    plain = scheduler_e2e.without_opt_in(tiered)
    assert not is_tiered_pod(plain["metadata"].get("labels"))
    assert body["spec"] == plain["spec"]
    assert "tmc.dev/tiered" in tiered["spec"]["containers"][0]["resources"]["requests"]


def test_the_guard_floor_is_one_tail_path_at_a_time() -> None:
    with pytest.raises(SystemExit):
        scheduler_e2e.main(["--guard-floor", "--dra", "--nodes", "10", "--pods", "10"])


def test_a_benchmarks_result_renders_into_a_page(tmp_path: Path) -> None:
    out = tmp_path / "refresh.json"
    publisher_refresh.main(["--pairs", "30", "--json", str(out)])
    page = tmp_path / "page.md"
    page.write_text(
        '<!-- bench-table file="refresh.json" columns="decisions" first="step" -->\n'
        "<!-- /bench-table -->\n"
    )
    assert render_main([str(page)]) == 0
    assert "| nothing changed (utilization within 0.05) | 0 |" in page.read_text()
