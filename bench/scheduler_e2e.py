"""500 opted-in pods through a real kube-scheduler, with the tmc extender and without it, in the
same run (same control plane, same nodes, same PostgreSQL).

    python -m bench.scheduler_e2e [--pods 500]

Needs the control plane of tests/scheduler/controlplane (built from Go modules, or
TMC_K8S_BIN). For each configuration: pods created from 8 threads, bound time per pod (create to
spec.nodeName seen), pods/s until the last is bound, and the extender's own time per pod (filter
+ prioritize + bind, from its /metrics). Prints the figures; docs/scheduler.md has them.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from api.migrate import upgrade_to_head
from tests.scheduler.controlplane import ControlPlane
from tests.scheduler.test_e2e import ExtenderProcess, add_nodes, core, pod, scheduler_config
from tests.services import PostgresServer


def run(cp: ControlPlane, config: Path, prefix: str, n: int, scheduler: str) -> list[float]:
    api = core(cp)
    cp.start_scheduler(config)
    created: dict[str, float] = {}

    def create(i: int) -> None:
        body = pod(f"{prefix}-{i}", "graph500")
        body["spec"]["schedulerName"] = scheduler
        created[str(body["metadata"]["name"])] = time.monotonic()
        api.create_namespaced_pod("default", body)  # type: ignore[arg-type]

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(n)))
    bound: dict[str, float] = {}
    while len(bound) < n and time.monotonic() - start < 300:
        for p in api.list_namespaced_pod("default").items:
            name = str(p.metadata.name)  # type: ignore[union-attr]
            if name.startswith(prefix + "-") and p.spec.node_name and name not in bound:  # type: ignore[union-attr]
                bound[name] = time.monotonic()
        time.sleep(0.05)
    elapsed = max(bound.values()) - start
    print(
        f"{prefix:<12} {len(bound)}/{n} bound, {len(bound) / elapsed:6.1f} pods/s, "
        f"median {statistics.median(bound[k] - created[k] for k in bound) * 1000:.0f} ms"
    )
    return [bound[k] - created[k] for k in bound]


def extender_seconds(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(
        float(v)
        for v in re.findall(
            r'^tmc_extender_request_duration_seconds_sum\{verb="\w+"\} (\S+)$', text, re.M
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=500)
    args = ap.parse_args()
    cp = ControlPlane()
    postgres = PostgresServer()
    try:
        upgrade_to_head(postgres.url)
        cp.start()
        api = core(cp)
        api.create_namespaced_service_account("default", {"metadata": {"name": "default"}})  # type: ignore[arg-type]
        add_nodes(api)
        ext = ExtenderProcess(cp, postgres.url)
        ext.start()
        with_ext = scheduler_config(cp, ext.port)
        plain = cp.dir / "plain.yaml"
        cfg = yaml.safe_load(with_ext.read_text())
        cfg.pop("extenders")
        cfg["profiles"] = [{"schedulerName": "plain"}]
        plain.write_text(yaml.safe_dump(cfg))
        run(cp, plain, "plain", args.pods, "plain")
        before = extender_seconds(ext.port)
        run(cp, with_ext, "tmc", args.pods, "tmc-scheduler")
        per_pod = (extender_seconds(ext.port) - before) / args.pods
        print(f"extender time per pod (filter + prioritize + bind): {per_pod * 1000:.2f} ms")
        ext.kill()
    finally:
        cp.close()
        postgres.close()


if __name__ == "__main__":
    main()
