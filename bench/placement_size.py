# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,union-attr,no-untyped-call"
"""What a placement's size costs the API server: the CPU kube-apiserver spends per placed pod
when the placement carries its per-structure plan (tmc.placement/v2) and when it names the
published recommendation the plan is in (tmc.placement/v3), on a real control plane (etcd and
kube-apiserver from tests/scheduler/controlplane), with pod watchers open as a cluster has them
(the scheduler, the kubelet, the publisher, tmc-nri: every event of a pod goes to each).

    python -m bench.placement_size [--repeat 10] [--pods 150] [--watchers 3] [--json PATH]

Each round makes N pods, binds each with the arm's placement annotations (as tmc's Bind does),
patches its status twice (phase, then a condition, as a kubelet would) and deletes it; its cost
is kube-apiserver's user and system CPU over the round divided by N. The two arms alternate
round by round, their order swapping, so that drift in the machine's load hits both alike. The
placements are graph500's as the engine writes them: four structures, a 253-character node
name at most (here 11). Prints each arm's median, the ratio v3 / v2 measured in the same run,
and the load average before and after.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch

from bench.harness import Result, arguments, load_line, process_cpu_seconds
from model.node_contract import (
    PLACEMENT_ANNOTATION,
    PlacedConfiguration,
    Placement,
    PlanSource,
    StructurePlan,
)
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.controlplane import cluster as c

NAMESPACE = "bench-placed"
ARMS = ("v2-plan", "v3-plan-from")


def placements() -> dict[str, dict[str, str]]:
    """The two arms' annotations: the same configuration, the plan carried or named."""
    conf = PlacedConfiguration(
        vcpus=4, dram_bytes=3 << 30, slow_bytes=1 << 30, slow_ratio=0.25, llc_ways=6
    )
    common: dict[str, Any] = {
        "node": "node-a-0001",
        "workload": "graph500",
        "objective": "slo:5%",
        "configuration": conf,
        "llc_mask": "0x3f",
        "recommendation_id": "3f2a9c1e-6b1d-4c55-9a31-0f5a3f2b7c10",
    }
    tags = ("edges", "frontier", "visited", "parents")
    carried = Placement(
        **common,
        plan=[StructurePlan(tag=t, fast_bytes=805306368, slow_bytes=268435456) for t in tags],
    )
    named = Placement(
        schema_="tmc.placement/v3",
        **common,
        plan_from=PlanSource(recommendation="graph500-slo-5-3993aa89a2de", generation=2),
    )
    return {"v2-plan": carried.to_annotations(), "v3-plan-from": named.to_annotations()}


def one_round(
    cp: ControlPlane, api: k8s.CoreV1Api, n: int, tag: str, annotations: dict[str, str]
) -> float:
    """N placed pods' lives: kube-apiserver's CPU ms per pod."""
    pid = cp.procs["kube-apiserver"].pid
    before = process_cpu_seconds(pid)
    for i in range(n):
        name = f"{tag}-{i}"
        made = api.create_namespaced_pod(
            NAMESPACE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        )
        binding = {
            "metadata": {"name": name, "uid": made.metadata.uid, "annotations": annotations},
            "target": {"kind": "Node", "name": "node-a-0001"},
        }
        api.create_namespaced_pod_binding(name, NAMESPACE, binding, _preload_content=False)
        api.patch_namespaced_pod_status(name, NAMESPACE, {"status": {"phase": "Running"}})
        api.patch_namespaced_pod_status(
            name, NAMESPACE, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        )
        api.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    return (process_cpu_seconds(pid) - before) * 1000 / n


def watch_pods(cp: ControlPlane, stop: threading.Event) -> None:
    """A pod watcher, as each of a cluster's pod informers is: reads every event to the end."""
    api = c.core(cp)
    while not stop.is_set():
        try:
            for _ in watch.Watch().stream(api.list_pod_for_all_namespaces, timeout_seconds=10):
                if stop.is_set():
                    return
        except Exception:  # the API server stopping ends the watch; so does this
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(
        __doc__,
        repeat=10,
        repeat_help="rounds per arm",
        repeat_aliases=("--rounds",),
        repeat_bounds=(1, 50),
    )
    parser.add_argument("--pods", type=int, default=150, help="pods per round")
    parser.add_argument("--watchers", type=int, default=3, help="pod watchers open")
    args = parser.parse_args(argv)
    if not 1 <= args.pods <= 10000:
        parser.error("--pods must be in 1..10000")
    if not 0 <= args.watchers <= 32:
        parser.error("--watchers must be in 0..32")
    arms = placements()
    sizes = {arm: len(arms[arm][PLACEMENT_ANNOTATION]) for arm in ARMS}
    result = Result(
        "placement_size",
        {"rounds": args.repeat, "pods": args.pods, "watchers": args.watchers},
    )
    cp = ControlPlane()
    stop = threading.Event()
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    try:
        cp.start()
        c.install_rbac(cp, {"admission": {"enabled": False}})
        api = c.core(cp)
        c.register_node(api, c.node_object("node-a-0001"))
        api.create_namespace({"metadata": {"name": NAMESPACE}})
        c.ensure_default_account(api, NAMESPACE)
        for _ in range(args.watchers):
            threading.Thread(target=watch_pods, args=(cp, stop), daemon=True).start()
        one_round(cp, api, min(args.pods, 20), "warm", arms["v2-plan"])
        for r in range(args.repeat):
            for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
                ms = one_round(cp, api, args.pods, f"r{r}-{arm}", arms[arm])
                samples[arm].append(ms)
                print(f"round {r} {arm:13s} {ms:6.3f} ms/pod", flush=True)
    finally:
        stop.set()
        cp.close()
    print(
        f"\nkube-apiserver CPU per placed pod (create, bind, two status patches, delete), "
        f"{args.repeat} rounds x {args.pods} pods, {args.watchers} pod watchers:"
    )
    for arm in ARMS:
        result.figure(arm, "placement bytes", sizes[arm])
        result.figure(arm, "median ms/pod", statistics.median(samples[arm]), 3)
    paired = [v3 / v2 for v2, v3 in zip(samples["v2-plan"], samples["v3-plan-from"], strict=True)]
    result.figure("v3-plan-from", "median of paired ratios", statistics.median(paired), 3)
    for arm in ARMS:
        rel = result.compare(arm, "median ms/pod", "v2-plan", label="ratio to v2")
        med = result.figures[arm]["median ms/pod"]
        print(
            f"  {arm:13s} {sizes[arm]:4d} bytes  median {med:6.3f} ms/pod  ratio to v2 {rel:5.3f}"
        )
    print(f"  median of the rounds' paired ratios v3 / v2: {statistics.median(paired):5.3f}")
    print(load_line(result.write(args.json)))


if __name__ == "__main__":
    main()
