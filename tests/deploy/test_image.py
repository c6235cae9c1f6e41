"""deploy/image: the OCI layout writer is reproducible and valid, the profiling variant's package
list agrees with what the agent and the build need, and an image `./dev image` built (when there
is one) holds what the chart's commands need and nothing of the build; the profiling variant
(`./dev image --profiling`) also its tools, runnable."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EPOCH = 1_700_000_000


def load_oci() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oci", ROOT / "deploy" / "image" / "oci.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rootfs(path: Path, order: list[str], mtime: int) -> Path:
    """A small root filesystem tarball, members in `order`, every mtime `mtime`."""
    entries: dict[str, tuple[bytes | None, int]] = {
        "./": (None, tarfile.DIRTYPE[0]),
        "./dev/": (None, tarfile.DIRTYPE[0]),
        "./dev/null": (None, tarfile.CHRTYPE[0]),
        "./etc/": (None, tarfile.DIRTYPE[0]),
        "./etc/hostname": (b"tmc\n", tarfile.REGTYPE[0]),
        "./opt/tmc/bin/tmc": (b"#!/opt/tmc/bin/python\n", tarfile.REGTYPE[0]),
    }
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in order:
            data, kind = entries[name]
            info = tarfile.TarInfo(name)
            info.type = bytes([kind])
            info.mtime = mtime
            info.uname, info.gname = "root", "root"
            info.pax_headers = {"atime": str(mtime + 5)}
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def build(oci: ModuleType, src: Path, out: Path) -> str:
    digest: str = oci.build(
        src,
        out,
        ref="0.1.0",
        epoch=EPOCH,
        env=["PATH=/opt/tmc/bin:/usr/bin:/bin"],
        user="10001",
        workdir="/app",
        cmd=["tmc", "serve"],
        labels={"org.opencontainers.image.version": "0.1.0"},
    )
    return digest


def blob(layout: Path, descriptor: dict[str, Any]) -> bytes:
    algo, hexdigest = descriptor["digest"].split(":")
    data: bytes = (layout / "blobs" / str(algo) / str(hexdigest)).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hexdigest
    assert len(data) == descriptor["size"]
    return data


def read_layout(layout: Path) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    """(the index's manifest entry, the config, the uncompressed layer), every digest checked."""
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads(blob(layout, entry))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(blob(layout, manifest["config"]))
    (layer_desc,) = manifest["layers"]
    layer = gzip.decompress(blob(layout, layer_desc))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    return entry, config, layer


def test_the_layout_is_the_same_whatever_the_order_and_times_of_the_rootfs(tmp_path: Path) -> None:
    oci = load_oci()
    names = ["./", "./dev/", "./dev/null", "./etc/", "./etc/hostname", "./opt/tmc/bin/tmc"]
    a = rootfs(tmp_path / "a.tar", names, EPOCH + 3600)
    b = rootfs(tmp_path / "b.tar", list(reversed(names)), EPOCH + 7200)
    first, second = build(oci, a, tmp_path / "one"), build(oci, b, tmp_path / "two")
    assert first == second
    assert sorted(p.name for p in (tmp_path / "one" / "blobs" / "sha256").iterdir()) == sorted(
        p.name for p in (tmp_path / "two" / "blobs" / "sha256").iterdir()
    )
    entry, config, layer = read_layout(tmp_path / "one")
    assert entry["digest"] == first
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
    assert config["config"]["User"] == "10001" and config["config"]["Cmd"] == ["tmc", "serve"]
    assert config["created"] == "2023-11-14T22:13:20Z"
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = tar.getmembers()
    names_out = [m.name for m in members]
    assert names_out == [".", "dev", "etc", "etc/hostname", "opt/tmc/bin/tmc"]  # no device node
    assert all(m.mtime == EPOCH and m.uname == "" and not m.pax_headers for m in members)
    # A different file content is a different image.
    c = rootfs(tmp_path / "c.tar", names[:-1], EPOCH)
    assert build(oci, c, tmp_path / "three") != first


IMAGE = ROOT / "deploy" / "image"
PROFILE_JOB = ROOT / "deploy" / "examples" / "profile-job.yaml"
# What the profiling variant's tools are, as the agent's `discover` and the Makefile use them.
PROFILING_TOOLS = {"valgrind": "valgrind", "gcc": "gcc", "make": "make", "perf": "linux-perf"}


def pinned(name: str) -> dict[str, str]:
    """A package list of deploy/image: package -> its pinned version."""
    out: dict[str, str] = {}
    for line in (IMAGE / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        package, sep, version = line.partition("=")
        assert sep and re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", package), line
        assert re.fullmatch(r"[0-9A-Za-z.+~:-]+", version), line
        assert package not in out, f"{package} listed twice"
        out[package] = version
    return out


def app_version() -> str:
    return str(yaml.safe_load((ROOT / "deploy/helm/tmc/Chart.yaml").read_text())["appVersion"])


def test_the_profiling_variant_pins_the_agents_tools_and_the_job_names_it() -> None:
    """packages-profiling.txt adds the tools `tmc-agent profile` runs (each pinned, none already
    in the base list), build.sh runs each of them in the chroot, `./dev` installs the same ones
    for the agent's tests, and the profiling Job names the variant's tag."""
    base, profiling = pinned("packages.txt"), pinned("packages-profiling.txt")
    assert not set(base) & set(profiling)
    assert set(PROFILING_TOOLS.values()) | {"libc6-dev"} <= set(profiling)
    build = (IMAGE / "build.sh").read_text()
    assert "packages-profiling.txt" in build
    for tool in PROFILING_TOOLS:
        assert f'"{tool} --version"' in build, tool
    assert "all tmctrace" in build  # the shim and the Valgrind tool built in the chroot
    dev = (ROOT / "dev").read_text()
    needed = re.search(r"apt_install valgrind ([a-z0-9 -]+)\n", dev)
    assert needed is not None
    assert {"valgrind", *needed.group(1).split()} <= set(profiling)
    (job,) = [d for d in yaml.safe_load_all(PROFILE_JOB.read_text()) if d]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"].rsplit(":", 1)[1] == f"{app_version()}-profiling"


BUILT = Path(os.environ.get("TMC_IMAGE_DIR", str(ROOT / "build" / "image")))
VARIANT = os.environ.get("TMC_IMAGE_VARIANT", "default")


@pytest.mark.built_image
def test_the_built_image_holds_the_commands_and_nothing_of_the_build() -> None:
    entry, config, layer = read_layout(BUILT)
    ref = app_version() + ("-profiling" if VARIANT == "profiling" else "")
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == ref
    assert config["config"]["User"] == "10001"
    assert config["config"]["Env"][0].startswith("PATH=/opt/tmc/bin:")
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = set(tar.getnames())
    # Every command the chart runs (tmc, uvicorn, celery, python, tmc-agent) is on the PATH.
    for command in ("tmc", "tmc-agent", "uvicorn", "celery", "python"):
        assert f"opt/tmc/bin/{command}" in names, command
    for source in ("app/api/bootstrap.py", "app/alembic.ini", "app/migrations/env.py"):
        assert source in names
    # Nothing of the build machine: its CA bundle copy, resolver, byte-code with build times.
    assert "tmp/build-ca.crt" not in names and "etc/resolv.conf" not in names
    assert not [n for n in names if n.startswith("app/") and "__pycache__" in n]


def in_image(root: Path, *argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` run in the unpacked image as a container runtime would give it a /proc and a
    /dev: a private mount and pid namespace (nothing is left mounted after it), then chroot."""
    script = 'mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", f"--mount-proc={root / 'proc'}",
         "sh", "-c", script, str(root), *argv],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.mark.built_image
@pytest.mark.skipif(VARIANT != "profiling", reason="the default image has no profiling tools")
def test_the_profiling_image_runs_its_tools(tmp_path: Path) -> None:
    """The variant's tools are in the layer, and run from it: the layer unpacked and each tool
    run in it (the build ran them too, before packing), then the allocator shim and tmctrace
    built by make with the image's compiler and Valgrind."""
    _, _, layer = read_layout(BUILT)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = set(tar.getnames())
        for path in ("usr/bin/valgrind", "usr/bin/gcc", "usr/bin/make", "usr/bin/perf"):
            assert path in names, path
        assert "usr/include/stdio.h" in names  # libc6-dev: the shim's headers
        assert [n for n in names if n.endswith("/libcoregrind-amd64-linux.a")]
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("running the tools needs root for chroot (./dev image runs as root)")
        tar.extractall(tmp_path / "root", filter="fully_trusted")
    root = tmp_path / "root"
    for directory in ("proc", "dev", "tmp"):
        (root / directory).mkdir(exist_ok=True)
    for tool in PROFILING_TOOLS:
        done = in_image(root, tool, "--version", timeout=60)
        assert done.returncode == 0, f"{tool}: {done.stderr[-500:]}"
    made = in_image(root, "make", "-s", "-C", "/app/profiler-agent/alloc", "OUT=/tmp/check",
                    "all", "tmctrace", timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    assert (root / "tmp/check/libtmcalloc.so").is_file()
    assert (root / "tmp/check/valgrind/tmctrace-amd64-linux").is_file()
    # valgrind runs a program in the image (memcheck: its own preload libraries are there).
    ran = in_image(root, "valgrind", "-q", "--error-exitcode=3", "/bin/true", timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
