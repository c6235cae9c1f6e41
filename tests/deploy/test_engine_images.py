"""`./dev image` for the placement engine: tmc-scheduler and tmc-extender as OCI layouts,
built without Docker, the same digests twice, and an interrupted build that leaves nothing."""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GO_IMAGES = ROOT / "deploy" / "image" / "go-images.sh"
ENGINE = ("tmc-scheduler", "tmc-extender")


def build(out: Path, tmp: Path) -> dict[str, str]:
    done = subprocess.run(
        ["bash", str(GO_IMAGES), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split() for line in done.stdout.splitlines())


def blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


@pytest.mark.slow
def test_two_builds_give_the_same_digests_and_runnable_layouts(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    first = build(tmp_path / "a", tmp_path / "tmp")
    second = build(tmp_path / "b", tmp_path / "tmp")
    assert set(first) == set(ENGINE)
    assert first == second
    for name in ENGINE:
        layout = tmp_path / "a" / f"image-{name}"
        index = json.loads((layout / "index.json").read_text())
        (entry,) = index["manifests"]
        assert entry["digest"] == first[name]
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "v1.36.3"
        manifest = json.loads(blob(layout, entry["digest"]))
        config = json.loads(blob(layout, manifest["config"]["digest"]))
        assert config["config"]["Cmd"] == [f"/usr/local/bin/{name}"]
        assert config["config"]["User"] == "10001"
        (layer,) = manifest["layers"]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layout, layer["digest"])))) as t:
            members = {m.name.removeprefix("./"): m for m in t.getmembers()}
            binary = members[f"usr/local/bin/{name}"]
            assert binary.isfile() and binary.mode & 0o111 and binary.size > 1_000_000
            if name == "tmc-scheduler":
                # The chart runs tmc-dra-publisher (dra.enabled) from the scheduler's image.
                publisher = members["usr/local/bin/tmc-dra-publisher"]
                assert publisher.isfile() and publisher.mode & 0o111 and publisher.size > 1_000_000
    assert list((tmp_path / "tmp").iterdir()) == [], "the builds left their work behind"


@pytest.mark.slow
def test_an_interrupted_build_removes_what_it_wrote(tmp_path: Path) -> None:
    """Ctrl-C during the build: its work folder and partial layouts are gone, and an image
    built before stays as it was."""
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    earlier = out / "image-tmc-scheduler"
    earlier.mkdir(parents=True)
    (earlier / "index.json").write_text("{}")
    proc = subprocess.Popen(
        ["bash", str(GO_IMAGES), str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp)},
        start_new_session=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    assert "building tmc-scheduler" in line, line
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to the foreground group
    assert proc.wait(60) != 0
    assert list(tmp.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["image-tmc-scheduler"]
    assert (earlier / "index.json").read_text() == "{}"


def test_dev_image_help_prints_usage_and_builds_nothing() -> None:
    for flag in ("--help", "-h"):
        done = subprocess.run(
            [str(ROOT / "dev"), "image", flag],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: ./dev image")
        assert "tmc-scheduler" in done.stdout and "tmc-extender" in done.stdout
        assert "[image]" not in done.stderr  # no build started
    bad = subprocess.run(
        [str(ROOT / "dev"), "image", "--no-such-flag"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "usage: ./dev image" in bad.stderr
