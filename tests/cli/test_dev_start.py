"""`./dev start --port N`: the port is a flag, and a port in use is refused before the token and
the banner are printed."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dev_start_on_a_taken_port_prints_one_line_and_no_token(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "TMC_DATABASE_URL": f"sqlite:///{tmp_path / 'dev.db'}"}
        done = subprocess.run(
            [str(ROOT / "dev"), "start", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 2, done.stderr
    assert "token" not in done.stdout.lower() and "tmc is starting" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"port {port}" in errors[0] and "--port N" in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "dev.db").exists()
