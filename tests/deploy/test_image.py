"""deploy/image: the OCI layout writer is reproducible and valid, and an image `./dev image`
built (when there is one) holds what the chart's commands need and nothing of the build."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
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


BUILT = Path(os.environ.get("TMC_IMAGE_DIR", str(ROOT / "build" / "image")))


@pytest.mark.built_image
def test_the_built_image_holds_the_commands_and_nothing_of_the_build() -> None:
    entry, config, layer = read_layout(BUILT)
    version = yaml.safe_load((ROOT / "deploy/helm/tmc/Chart.yaml").read_text())["appVersion"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == version
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
