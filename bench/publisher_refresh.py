"""The publisher's refresh at a fleet's number of pairs: the CPU a refresh costs when nothing
changed, when 1 % of the workloads changed, and when utilization moved (every pair decided
again, as every refresh did before). Decisions are a stub here (each one is a call into the
service, ~3 ms of worker CPU by `bench.service_load`): the figure is the publisher's own work,
and the count of decisions it asks for.

    python -m bench.publisher_refresh [--pairs 30000] [--json PATH]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.harness import Result, arguments
from model import Utilization
from model.node_contract import Recommendation
from scheduler.decisions import Changed
from scheduler.publisher import RecommendationPublisher
from scheduler.status import Decided


class InMemoryObjects:
    """The objects' store in memory (the real one is the API server's, tested end to end)."""

    def __init__(self) -> None:
        self.bodies: dict[str, dict[str, Any]] = {}

    def list(self) -> list[dict[str, Any]]:
        return list(self.bodies.values())

    def upsert(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies[body["metadata"]["name"]] = body
        return {**body, "metadata": {**body["metadata"], "generation": 1}}

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        self.bodies[name]["status"] = status

    def delete(self, name: str) -> None:
        self.bodies.pop(name, None)


def main(argv: Sequence[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--pairs", type=int, default=30_000)
    args = parser.parse_args(argv)
    if not 3 <= args.pairs <= 1_000_000:
        parser.error("--pairs must be in 3..1000000")
    workloads = max(1, args.pairs // 3)  # three objectives per workload
    decided = [0]
    util = [Utilization(cpu=0.5, dram=0.5, slow=0.2, llc=0.3)]

    def decide(workload: str, objective: str) -> Decided:
        decided[0] += 1
        return Decided(Recommendation(workload=workload, objective=objective, llc_ways=2))

    result = Result("publisher_refresh", {"pairs": args.pairs, "workloads": workloads})
    pub = RecommendationPublisher(InMemoryObjects(), decide, utilization=lambda: util[0])
    for i in range(args.pairs):
        pub.publish(
            (f"w{i % workloads:05d}", ("cheapest", "slo:5%", "slo:10%")[i // workloads % 3])
        )
    pub.refresh()
    pub.publish_pending()

    def measure(label: str, step: Any) -> None:
        decided[0] = 0
        started = time.process_time()
        asked = step()
        pub.publish_pending()
        cpu = time.process_time() - started
        print(f"  {label}: {cpu:.3f} CPU s, {asked} pairs asked for, {decided[0]} decisions")
        result.figure(label, "CPU s", cpu, 3)
        result.figure(label, "pairs asked for", asked)
        result.figure(label, "decisions", decided[0])

    print(f"# publisher refresh, {args.pairs} published pairs ({workloads} workloads x 3)")
    measure("nothing changed (utilization within 0.05)", pub.refresh)
    changed = {f"w{i:05d}" for i in range(0, workloads, 100)}  # 1 % of the workloads
    measure("1 % of the workloads with a new fit or run", lambda: pub.changed(Changed(changed)))
    util[0] = Utilization(cpu=0.5, dram=0.6, slow=0.2, llc=0.3)
    measure("utilization moved: every pair (what every refresh did before)", pub.refresh)
    result.write(args.json)


if __name__ == "__main__":
    main()
