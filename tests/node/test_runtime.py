"""tmc-nri on a real runtime: containerd (from the Go module proxy) with Debian's runc, the plugin
registered over NRI's socket, pods and containers created through the CRI API with the
annotations the kubelet passes. Each test reads the runtime spec containerd produced after
CreateContainer (before the container starts), then runs the container and reads what its
process saw.

This machine has one NUMA node, no slow memory and no resctrl: the tests that need those give the
plugin a sysfs and a resctrl tree of files (tests/node/fakes.py), and check the spec only, since
runc cannot join memory nodes or a resctrl group the machine lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from model import node_contract as contract
from tests.node.conftest import Node, PluginFactory
from tests.node.fakes import resctrl_tree, two_socket_sysfs

pytestmark = pytest.mark.slow  # a real containerd, built once per machine

GIB = 1 << 30


def placement(
    mask: str,
    ways: int,
    dram: int,
    slow: int = 0,
    node: str = "node-a",
    sized_from: Literal["request", "recommendation"] | None = None,
) -> str:
    p = contract.Placement(
        node=node,
        workload="graph500",
        configuration=contract.PlacedConfiguration(
            vcpus=1, dram_bytes=dram, slow_bytes=slow, slow_ratio=0.0, llc_ways=ways
        ),
        llc_mask=mask,
        recommendation_id="r-1",
        plan=[contract.StructurePlan(tag="edges", fast_bytes=dram // 2, slow_bytes=slow)],
        sized_from=sized_from,
    )
    return p.to_annotations()[contract.PLACEMENT_ANNOTATION]


def placed(mask: str, ways: int, dram: int, slow: int = 0) -> dict[str, str]:
    return {
        contract.PLACEMENT_ANNOTATION: placement(mask, ways, dram, slow),
        contract.LLC_MASK_ANNOTATION: mask,
    }


def uid(n: int) -> str:
    return f"6f1c2a9e-0000-4000-8000-{n:012d}"


def create(node: Node, name: str, n: int, ann: dict[str, str], cpuset: str = "") -> str:
    pod = node.runtime.run_pod(name, uid(n), ann)
    return node.runtime.create(pod, name, uid(n), ann, name, cpuset=cpuset).stdout.strip()


def seen(logs: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in logs.splitlines():
        key, _, value = line.partition(" ")
        out.setdefault(key, []).append(value.strip())
    return out


def tmc_mounts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["destination"]: m for m in spec["mounts"] if m["destination"].startswith("/run/tmc")}


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in spec["process"]["env"])


def test_placed_container_is_configured_before_its_first_instruction(
    node: Node, start_plugin: PluginFactory
) -> None:
    plugin = start_plugin()
    cid = create(node, "bfs", 1, placed("0xc", 2, 256 << 20))
    spec = node.runtime.spec(cid)
    # The memory the placement gives the pod, and the DRAM node of its CPUs (no slow node here).
    assert spec["linux"]["resources"]["memory"]["limit"] == 256 << 20
    assert spec["linux"]["resources"]["cpu"]["mems"] == "0"
    mounts = tmc_mounts(spec)
    plan_file = node.plans / f"{uid(1)}.plan"
    assert mounts["/run/tmc/plan"]["source"] == str(plan_file)
    assert "ro" in mounts["/run/tmc/plan"]["options"]
    assert mounts["/run/tmc/libtmcalloc.so"]["source"] == str(node.shim_dir / "libtmcalloc.so")
    env = env_of(spec)
    assert env["TMC_PLAN"] == "/run/tmc/plan"
    assert env["LD_PRELOAD"] == "/run/tmc/libtmcalloc.so"
    # No resctrl on this machine: nothing written, and the pod is told so.
    assert "intelRdt" not in spec["linux"]
    events = plugin.events()
    assert [e["reason"] for e in events] == ["TmcNotApplied"]
    assert "no L3 CAT through resctrl" in events[0]["message"]
    metrics = plugin.metrics()
    assert metrics['tmc_nri_unapplied_total{what="llc-mask"}'] == 1
    assert metrics['tmc_nri_containers_total{outcome="partial"}'] == 1
    record_path = node.plans / "applied" / uid(1) / "bfs.json"
    record = json.loads(record_path.read_text())
    assert record["started"] is False and record["complete"] is False

    logs = seen(node.runtime.run_to_end(cid))
    # What the process saw: its plan (the file the plugin rendered, read-only), its memory node,
    # its memory limit, and the allocator shim mapped before main.
    assert logs["env-TMC_PLAN"] == ["/run/tmc/plan"]
    rendered = contract.parse_plan_file(plan_file.read_text())
    assert [f"{line}" for line in logs["plan"]] == plan_file.read_text().splitlines()
    assert rendered.fast_node == 0 and rendered.fast_bytes == {"edges": 128 << 20}
    assert logs["status"] == ["Mems_allowed_list:\t0"]
    assert logs["memory-limit-v1"] == [str(256 << 20)]
    assert logs["shim-mapped"] == ["1"]
    final = json.loads(record_path.read_text())
    assert final["confirmed"] is True and final["started"] is True


def test_pod_tmc_did_not_place_is_left_exactly_as_it_was(
    node: Node, start_plugin: PluginFactory
) -> None:
    # The same pod with the plugin running and without it: the same spec.
    ann = {contract.WORKLOAD_ANNOTATION: "graph500", contract.LLC_MASK_ANNOTATION: "0xff"}
    without = node.runtime.spec(create(node, "plain", 2, ann))
    node.runtime.remove_pods()
    plugin = start_plugin()
    with_plugin = node.runtime.spec(create(node, "plain", 3, ann))
    for spec in (without, with_plugin):
        # What differs between any two pods: their ids, sandboxes and cgroups.
        spec.pop("annotations", None)
        spec["linux"].pop("cgroupsPath", None)
        spec.pop("hostname", None)
        for m in spec["mounts"]:
            m.pop("source", None)
        for ns in spec["linux"].get("namespaces", []):
            ns.pop("path", None)  # the sandbox's own process
    assert with_plugin == without
    assert plugin.events() == []
    assert not (node.plans / f"{uid(3)}.plan").exists()


def test_fake_topology_and_resctrl_reach_the_spec(
    node: Node, start_plugin: PluginFactory, tmp_path: Path
) -> None:
    sysfs, resctrl = two_socket_sysfs(tmp_path / "sys"), resctrl_tree(tmp_path / "resctrl")
    plugin = start_plugin(sys_root=str(sysfs), resctrl=str(resctrl))
    # CPUs 2-3 are node1's: its DRAM and node3, the slow node nearest it.
    cid = create(node, "tiered", 4, placed("0x3c", 4, 4 * GIB, 2 * GIB), cpuset="2-3")
    spec = node.runtime.spec(cid)
    assert spec["linux"]["resources"]["cpu"]["mems"] == "1,3"
    assert spec["linux"]["resources"]["memory"]["limit"] == 6 * GIB
    group = f"tmc-pod-{uid(4)}"
    assert spec["linux"]["intelRdt"]["closID"] == group
    assert spec["linux"]["intelRdt"]["schemata"] == ["L3:0=3c;1=3c"]
    # Runtimes that only join a group by name (runc before 1.3) find it made with the schema.
    assert (resctrl / group / "schemata").read_text().strip() == "L3:0=3c;1=3c"
    plan = contract.parse_plan_file((node.plans / f"{uid(4)}.plan").read_text())
    assert (plan.fast_node, plan.slow_node) == (1, 3)
    assert plugin.events() == []
    assert plugin.metrics()['tmc_nri_containers_total{outcome="adjusted"}'] == 1
    # The node's own check: a stale leader's pod on the same ways fails creation, with a reason
    # the kubelet shows; the running pod's group is untouched.
    pod = node.runtime.run_pod("stale", uid(5), placed("0x30", 2, GIB))
    done = node.runtime.create(pod, "stale", uid(5), placed("0x30", 2, GIB), "stale", check=False)
    assert done.returncode != 0
    assert "LLC mask 0x30 overlaps default/tiered's 0x3c" in done.stderr
    assert (resctrl / group / "schemata").read_text().strip() == "L3:0=3c;1=3c"
    assert not (resctrl / f"tmc-pod-{uid(5)}").exists()
    assert [e["reason"] for e in plugin.events()] == ["TmcPlacementRefused"]
    assert plugin.metrics()['tmc_nri_containers_total{outcome="refused"}'] == 1
    # DRAM the node cannot hold (32 GiB of DRAM, 4 GiB held).
    ann = placed("0x3", 2, 30 * GIB)
    pod = node.runtime.run_pod("big", uid(6), ann)
    done = node.runtime.create(pod, "big", uid(6), ann, "big", check=False)
    assert done.returncode != 0 and "bytes of DRAM; the node has" in done.stderr


def test_a_pod_is_never_limited_below_its_own_ask(node: Node, start_plugin: PluginFactory) -> None:
    """A recommendation made from a 32 MiB trace, placed for a pod requesting 4 GiB: the engine
    gives the placement the pod's 4 GiB (scheduler/plugin ask.go, SizeToPod). A container without
    a limit of its own is held to the placement's bytes; a container with its own limit keeps it,
    larger or smaller, so a profile's small size never cuts the deployed program."""
    start_plugin()
    sized = placed("0x3", 2, 4 * GIB)
    cid = create(node, "sized", 11, sized)
    assert node.runtime.spec(cid)["linux"]["resources"]["memory"]["limit"] == 4 * GIB
    assert seen(node.runtime.run_to_end(cid))["memory-limit-v1"] == [str(4 * GIB)]
    # The pod's own limit, 8 GiB, above what its placement holds: kept, as the process sees it.
    pod = node.runtime.run_pod("own", uid(12), placed("0xc", 2, 32 << 20))
    cid = node.runtime.create(
        pod, "own", uid(12), placed("0xc", 2, 32 << 20), "own", memory_limit=8 * GIB
    ).stdout.strip()
    assert node.runtime.spec(cid)["linux"]["resources"]["memory"]["limit"] == 8 * GIB
    assert seen(node.runtime.run_to_end(cid))["memory-limit-v1"] == [str(8 * GIB)]
    # A container's own limit below its pod's placement (another container of the pod holds
    # the rest): kept too, never raised to the placement's bytes.
    pod = node.runtime.run_pod("small", uid(15), placed("0x30", 2, 4 * GIB))
    cid = node.runtime.create(
        pod, "small", uid(15), placed("0x30", 2, 4 * GIB), "small", memory_limit=GIB
    ).stdout.strip()
    assert node.runtime.spec(cid)["linux"]["resources"]["memory"]["limit"] == GIB
    assert seen(node.runtime.run_to_end(cid))["memory-limit-v1"] == [str(GIB)]


def test_a_pod_that_asked_for_no_memory_is_not_limited_to_its_recommendations_bytes(
    node: Node, start_plugin: PluginFactory
) -> None:
    """A pod that requests no memory is reserved its recommendation's own 32 MiB, and its
    placement says so (`sized_from`): tmc-nri sets no memory limit from bytes the pod never asked
    for, and the process sees none."""
    start_plugin()
    ann = {
        contract.PLACEMENT_ANNOTATION: placement("0xc0", 2, 32 << 20, sized_from="recommendation"),
        contract.LLC_MASK_ANNOTATION: "0xc0",
    }
    cid = create(node, "unasked", 14, ann)
    spec = node.runtime.spec(cid)
    assert env_of(spec)["TMC_PLAN"] == "/run/tmc/plan"  # placed, not refused as malformed
    assert "limit" not in (spec["linux"]["resources"].get("memory") or {})
    assert seen(node.runtime.run_to_end(cid))["memory-limit-v1"] != [str(32 << 20)]


def test_a_placed_containers_memory_is_not_raised_after_creation(
    node: Node, start_plugin: PluginFactory
) -> None:
    """`crictl update` (the path of a kubelet's resize too) may lower a placed container's memory
    limit, never raise it past what the node admitted; the pod is told why."""
    plugin = start_plugin()
    cid = create(node, "held", 13, placed("0x30", 2, 64 << 20))
    raised = node.runtime.crictl("update", "--memory", str(8 * GIB), cid, check=False)
    assert raised.returncode != 0
    assert "may not raise the memory limit" in raised.stderr + raised.stdout
    assert node.runtime.spec(cid)["linux"]["resources"]["memory"]["limit"] == 64 << 20
    assert "TmcUpdateRefused" in [e["reason"] for e in plugin.events()]
    lowered = node.runtime.crictl("update", "--memory", str(32 << 20), cid, check=False)
    assert lowered.returncode == 0, lowered.stderr


def test_verification_run_that_cannot_be_applied_does_not_start(
    node: Node, start_plugin: PluginFactory
) -> None:
    plugin = start_plugin()
    ann = {**placed("0x3", 2, 64 << 20), contract.VERIFICATION_RUN_ANNOTATION: "true"}
    pod = node.runtime.run_pod("verify", uid(7), ann)
    done = node.runtime.create(pod, "verify", uid(7), ann, "verify", check=False)
    assert done.returncode != 0
    assert "verification run whose configuration cannot be applied does not start" in done.stderr
    assert "no L3 CAT through resctrl" in done.stderr
    assert not (node.plans / "applied" / uid(7)).exists()
    assert [e["reason"] for e in plugin.events()] == ["TmcVerificationNotApplied"]


@pytest.mark.parametrize(
    "raw",
    [
        '{"schema":"x"}',
        "{" * 10_000,
        placement("0xc", 2, GIB).replace('"dram_bytes":1073741824', '"dram_bytes":' + "9" * 400),
    ],
    ids=["schema", "deep", "huge-number"],
)
def test_malformed_placement_starts_unadjusted_with_an_event(
    node: Node, start_plugin: PluginFactory, raw: str
) -> None:
    plugin = start_plugin()
    ann = {contract.PLACEMENT_ANNOTATION: raw}
    cid = create(node, "forged", 8, ann)
    spec = node.runtime.spec(cid)
    assert tmc_mounts(spec) == {} and "TMC_PLAN" not in env_of(spec)
    assert "mems" not in spec["linux"]["resources"].get("cpu", {})
    assert [e["reason"] for e in plugin.events()] == ["TmcPlacementMalformed"]
    assert plugin.metrics()['tmc_nri_containers_total{outcome="malformed"}'] == 1
    # The plugin did not fall over: the next placed pod is adjusted.
    assert plugin.proc is not None and plugin.proc.poll() is None
    cid = create(node, "next", 9, placed("0x1", 1, 64 << 20))
    assert env_of(node.runtime.spec(cid))["TMC_PLAN"] == "/run/tmc/plan"


def test_with_the_seals_keys_only_a_sealed_placement_is_applied(
    node: Node, start_plugin: PluginFactory, tmp_path: Path
) -> None:
    """tmc-nri with the placement seal's keys, as the chart runs it: a placement tmc's scheduler
    sealed for the pod is applied; the same placement unsealed, or sealed for another pod (what a
    tenant's own Binding can write), starts the container as if tmc had not placed it, with an
    Event and a count, and the plugin goes on."""
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "k1").write_text("a key of thirty-two bytes or more, for the node\n")
    keys = contract.PlacementSealKeys.from_directory(tmp_path / "keys", "k1")
    plugin = start_plugin(seal_keys=str(tmp_path / "keys"))
    unsealed = placed("0x3", 2, 128 << 20)
    anothers = {**unsealed, contract.PLACEMENT_SEAL_ANNOTATION: keys.seal(uid(99), unsealed)}
    for n, forged in ((10, unsealed), (11, anothers)):
        spec = node.runtime.spec(create(node, f"forged-{n}", n, forged))
        assert tmc_mounts(spec) == {} and "TMC_PLAN" not in env_of(spec)
        assert "limit" not in spec["linux"]["resources"].get("memory", {})
    assert [e["reason"] for e in plugin.events()] == ["TmcPlacementUnsealed"] * 2
    assert plugin.metrics()['tmc_nri_containers_total{outcome="unsealed"}'] == 2
    sealed = placed("0x3", 2, 128 << 20)
    sealed[contract.PLACEMENT_SEAL_ANNOTATION] = keys.seal(uid(12), sealed)
    spec = node.runtime.spec(create(node, "sealed", 12, sealed))
    assert spec["linux"]["resources"]["memory"]["limit"] == 128 << 20
    assert env_of(spec)["TMC_PLAN"] == "/run/tmc/plan"
