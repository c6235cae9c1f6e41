"""Fuzz the API for a fixed time: schemathesis against a service on PostgreSQL and Redis, loaded
with the demo's data, every operation with an operator's token. Prints the cases run and the
server errors found (none is the pass).

    python -m bench.fuzz_api [--seconds 300] [--seed N]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from bench.service_load import demo_service
from tests.services import postgres_and_redis, uvicorn_server, wait_until


def fuzz(seconds: int, seed: int) -> int:
    """Runs schemathesis for `seconds` against a fresh service; returns its exit status."""
    postgres, redis_server = postgres_and_redis()
    try:
        token, env = demo_service(postgres, redis_server)
        with uvicorn_server(env) as base, tempfile.TemporaryDirectory() as work:
            wait_until(
                lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, 60, "ready"
            )
            started = time.monotonic()
            result = subprocess.run(
                [
                    str(Path(sys.executable).with_name("schemathesis")),
                    "run",
                    f"{base}/openapi.json",
                    "--checks",
                    "not_a_server_error",
                    "--max-examples",
                    "100000",  # the time budget ends the run, not the examples
                    "--max-time",
                    str(seconds),
                    "--request-timeout",
                    "20",
                    "--seed",
                    str(seed),
                    "-H",
                    f"Authorization: Bearer {token}",
                    "--no-color",
                    "--report-dir",
                    work,
                ],
                capture_output=True,
                text=True,
                timeout=seconds + 600,
                check=False,
                cwd=work,  # schemathesis keeps its example database in the working directory
            )
            wall = time.monotonic() - started
    finally:
        redis_server.close()
        postgres.close()
    summary = re.search(r"(\d+) generated, (\d+) passed[^\n]*", result.stdout)
    errors = len(re.findall(r"Server error", result.stdout))
    print(f"seed {seed}; {wall:.0f} s of fuzzing")
    print(summary.group(0) if summary else result.stdout[-3000:])
    print(f"server errors: {errors}; schemathesis exit status {result.returncode}")
    if result.returncode != 0:
        print(result.stdout[-6000:] + result.stderr[-2000:])
    return result.returncode


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300, help="fuzzing time (default 300)")
    parser.add_argument("--seed", type=int, default=None, help="default: the current time")
    args = parser.parse_args(argv)
    if not 10 <= args.seconds <= 86_400:
        parser.error("--seconds lies in [10, 86400]")
    sys.exit(fuzz(args.seconds, int(time.time()) if args.seed is None else args.seed))


if __name__ == "__main__":
    main()
