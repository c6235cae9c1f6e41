"""A container's creation time through the CRI API, with and without the tmc NRI plugin, on the
real runtime the node tests use (containerd from the Go module proxy, Debian's runc, NRI on a
private socket; tests/node/runtime/harness.py).

    python -m bench.nri_create [--quick] [--repeat 4] [--per-round 20] [--json PATH]

Three arms, interleaved round by round (their order alternating) so that drift in the machine's
load hits them alike:
  baseline   no plugin connected; a pod tmc placed
  placed     tmc-nri connected; the same kind of pod (every adjustment: plan file written,
             record written, mounts, env, memory nodes and limit)
  unplaced   tmc-nri connected; a pod tmc did not place (the NRI round trip alone)
Each sample is one `crictl create` (CreateContainer) in an existing pod sandbox, timed around the
whole call: crictl's own start (tens of ms) is in every arm alike. Prints median, p90 and mean
per arm, the ratios to the baseline measured in the same run, and the load average before and
after.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from tmc_agent import shim

from bench.harness import Latency, Result, arguments, load_text
from model import node_contract as contract
from tests.node.runtime import harness


def placement_annotations() -> dict[str, str]:
    p = contract.Placement(
        node="node-a",
        workload="graph500",
        configuration=contract.PlacedConfiguration(
            vcpus=1, dram_bytes=256 << 20, slow_bytes=0, slow_ratio=0.0, llc_ways=2
        ),
        llc_mask="0xc",
        plan=[contract.StructurePlan(tag="edges", fast_bytes=128 << 20, slow_bytes=0)],
    )
    return p.to_annotations()


def block(rt: harness.Containerd, uid: str, ann: dict[str, str], n: int, tag: str) -> list[float]:
    pod = rt.run_pod(f"bench-{tag}", uid, ann)
    out = []
    for i in range(n):
        start = time.perf_counter()
        rt.create(pod, f"bench-{tag}", uid, ann, f"c{i}")
        out.append((time.perf_counter() - start) * 1000)
    rt.crictl("stopp", pod, check=False)
    rt.crictl("rmp", pod, check=False)
    return out


def summary(name: str, t: Latency) -> str:
    return (
        f"{name:9s} n={t.n:3d}  median {t.p50:7.1f} ms  p90 {t.p90:7.1f} ms  mean {t.mean:7.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    ap = arguments(
        __doc__,
        repeat=4,
        repeat_help="rounds, every arm measured once a round",
        repeat_aliases=("--rounds",),
        repeat_bounds=(1, 50),
    )
    ap.add_argument("--quick", action="store_true", help="1 round of 5 per arm")
    ap.add_argument("--per-round", type=int, default=20)
    args = ap.parse_args(argv)
    rounds, per_round = (1, 5) if args.quick else (args.repeat, args.per_round)
    if not 1 <= per_round <= 500:
        ap.error("--per-round 1..500")

    bin_dir = harness.build_runtime()
    with tempfile.TemporaryDirectory(prefix="tmc-nri-bench-") as tmp:
        base = Path(tmp)
        plugin_bin = harness.build_plugin(base / "bin")
        image = harness.build_image(base / "image")
        plans, shim_dir = base / "plans", base / "shim"
        plans.mkdir()
        shim.install(shim.build(base / "shim-build"), shim_dir)
        rt = harness.Containerd(bin_dir, base / "containerd")
        rt.start()
        plugin = harness.Plugin(plugin_bin, rt.nri_sock, plans, shim_dir, log=base / "nri.log")
        try:
            rt.ctr("images", "import", "--base-name", harness.IMAGE.split(":")[0], str(image))
            placed = placement_annotations()
            plain = {contract.WORKLOAD_ANNOTATION: "graph500"}
            samples: dict[str, list[float]] = {"baseline": [], "placed": [], "unplaced": []}
            # The plugin's own time in CreateContainer (its histogram's sum and count), per arm.
            own: dict[str, list[float]] = {"placed": [0.0, 0.0], "unplaced": [0.0, 0.0]}
            # The load average is read from here: the runtime's start is not the measurement's.
            result = Result("nri_create", {"rounds": rounds, "per_round": per_round})
            block(rt, "6f1c2a9e-0000-4000-8000-999999999999", placed, 3, "warm")  # warm caches
            serial = 0

            def handled() -> tuple[float, float]:
                m = plugin.metrics()
                return (
                    m.get("tmc_nri_create_container_seconds_sum", 0.0),
                    m.get("tmc_nri_create_container_seconds_count", 0.0),
                )

            def arm(name: str, ann: dict[str, str]) -> None:
                nonlocal serial
                serial += 1
                uid = f"6f1c2a9e-0000-4000-8000-{serial:012d}"
                before = handled() if plugin.proc is not None else None
                samples[name] += block(rt, uid, ann, per_round, name)
                if before is not None:
                    after = handled()
                    own[name][0] += after[0] - before[0]
                    own[name][1] += after[1] - before[1]

            def started() -> int:
                text = plugin.log.read_text() if plugin.log.exists() else ""
                return text.count("Started plugin")

            def plugin_on() -> None:
                registered = started()
                plugin.start()
                deadline = time.monotonic() + 20
                while started() <= registered:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"tmc-nri did not register: {plugin.log.read_text()}")
                    time.sleep(0.05)

            def plugin_off() -> None:
                plugin.stop()
                time.sleep(0.3)  # containerd drops the closed connection

            for r in range(rounds):
                # The arms' order alternates round by round, so that neither the plugin's start
                # nor the order within a round favours one of them.
                if r % 2 == 0:
                    arm("baseline", placed)
                    plugin_on()
                    arm("placed", placed)
                    arm("unplaced", plain)
                    plugin_off()
                else:
                    plugin_on()
                    arm("unplaced", plain)
                    arm("placed", placed)
                    plugin_off()
                    arm("baseline", placed)
        finally:
            plugin.stop()
            rt.remove_pods()
            rt.stop()
    print(
        f"CreateContainer through CRI (crictl create), containerd v2.4.2 + runc, {rounds} x {per_round} per arm"
    )
    figures = {name: result.latency(name, ms, digits=1) for name, ms in samples.items()}
    for name in samples:
        ratio = result.compare(name, "p50 ms", "baseline", label="ratio to baseline", digits=3)
        print(f"{summary(name, figures[name])}  ratio to baseline {ratio:.3f}")
    for name, (total, count) in own.items():
        if count:
            mean = result.figure(name, "tmc-nri's own mean ms", total / count * 1000, 3)
            print(
                f"{name:9s} tmc-nri's own time in CreateContainer: mean "
                f"{mean:.3f} ms over {int(count)} calls"
            )
    load = result.write(args.json)["load_average"]
    print(
        f"load average before {load_text(load['start'], 2)}, after {load_text(load['end'], 2)}"
        f" ({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
