"""Regenerate `examples/*.json`: the reference bundles of Table 5's workloads on the paper's host.

    python -m sim.make_examples [--out examples] [--seed 7] [--host optane] [workload ...]

Each bundle is what the agent would upload after profiling the workload on the simulated
Optane host (paper §4.1) with default counter noise, stall counters and SI = 10007.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.catalog import TABLE5, workload
from sim.machine import PRESETS
from sim.profile import NoiseSpec, reference_bundle

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEED = 7


def write_examples(
    out: Path, names: list[str], host_name: str = "optane", seed: int = DEFAULT_SEED
) -> list[Path]:
    host = PRESETS[host_name]()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        bundle = reference_bundle(workload(name), host, NoiseSpec(), seed)
        path = out / f"{name}.json"
        path.write_text(bundle.model_dump_json(indent=2, exclude_none=True) + "\n")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", help=f"default: all of {', '.join(TABLE5)}")
    parser.add_argument("--out", type=Path, default=ROOT / "examples")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--host", choices=sorted(PRESETS), default="optane")
    args = parser.parse_args()
    unknown = set(args.workloads) - set(TABLE5)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(TABLE5)}")
    for path in write_examples(args.out, args.workloads or list(TABLE5), args.host, args.seed):
        print(path)


if __name__ == "__main__":
    main()
