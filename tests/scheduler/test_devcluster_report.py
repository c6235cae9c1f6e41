"""`./dev cluster status` lists the control plane (etcd included) and PostgreSQL; `./dev cluster
down` says what it stopped and removed. Checked against stand-in processes: the real cluster is
`tests/scheduler/test_install.py`'s."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scheduler.controlplane import devcluster as dc


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, dict[str, int]]]:
    monkeypatch.setenv("TMC_K8S_BIN", str(tmp_path / "bin"))
    procs = {
        name: subprocess.Popen(["sleep", "300"])
        for name in ("etcd", "kube-apiserver", "tmc-scheduler", "api", "postgres")
    }
    pg_data = tmp_path / "pg" / "data"
    pg_data.mkdir(parents=True)
    (pg_data / "postmaster.pid").write_text(f"{procs['postgres'].pid}\n{pg_data}\n")
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    saved = dc.State(
        dir=str(cluster_dir),
        kubeconfig=str(cluster_dir / "admin.kubeconfig"),
        api_url="http://127.0.0.1:1",
        pg_bin=str(tmp_path / "no-pg-bin"),
        pg_data=str(pg_data),
        token_dir=str(cluster_dir / "mounted"),
        pids={n: p.pid for n, p in procs.items() if n != "postgres"},
    )
    path = tmp_path / "state.json"
    saved.save(path)
    try:
        yield path, {n: p.pid for n, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_status_lists_etcd_and_postgresql(
    state: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, pids = state
    assert dc.main(["status", "--state", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_name = {line.split()[0]: line for line in lines if line and not line[0].isspace()}
    for name in ("etcd", "kube-apiserver", "tmc-scheduler", "postgresql", "api"):
        assert name in by_name, lines
        assert by_name[name].split()[2] == str(pids["postgres" if name == "postgresql" else name])
        assert "running" in by_name[name]


def test_down_says_what_it_stopped_and_removed(
    state: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, pids = state
    assert dc.main(["down", "--state", str(path)]) == 0
    out = capsys.readouterr().out
    for name in ("etcd", "kube-apiserver", "tmc-scheduler", "api"):
        assert f"stopped {name} (pid {pids[name]})" in out
    assert "PostgreSQL" in out and "removed" in out and not path.exists()
    assert dc.main(["status", "--state", str(path)]) == 1
    assert "./dev cluster up" in capsys.readouterr().out


def _commands(text: str) -> list[str]:
    """Shell lines with continuations joined, comments and indentation dropped."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        command = line.split("  #", 1)[0].strip()
        if command:
            out.append(" ".join(command.split()))
    return out


def test_the_banner_gives_every_step_of_the_docs_upload_included() -> None:
    """`./dev cluster up`'s next steps are docs/install.md's "Try it on this machine" commands,
    in order, from the first kubectl to the recommendation read back: following either places
    the pod with graph500's recommendation (the profile upload is one of them)."""
    docs = (dc.ROOT / "docs" / "install.md").read_text()
    section = docs.split("## 7. Try it on this machine", 1)[1]
    block = section.split("Then, as on a real cluster:", 1)[1].split("```sh", 1)[1]
    documented = [c for c in _commands(block.split("```", 1)[0]) if not c.startswith("./dev")]
    banner = _commands(dc.next_steps())
    assert banner == documented
    assert any("/v1/profiles" in c for c in banner)
