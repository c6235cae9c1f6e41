"""Pack a root filesystem tarball into an OCI image layout, byte for byte reproducibly.

    python deploy/image/oci.py ROOTFS.tar OUT_DIR --ref 0.1.0 --created EPOCH \
        --env PATH=... --user 10001 --workdir /app --cmd tmc serve ...

The layer is the rootfs re-packed in name order with every timestamp clamped to --created, owners
numeric, no device nodes (the runtime provides /dev) and gzip without a name or time; the config,
manifest and index are canonical JSON. The same rootfs and options give the same digests, which
is what makes `./dev image` reproducible. The layout is what `skopeo copy oci:OUT_DIR:REF ...`
pushes to a registry.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CHUNK = 1 << 20


class _Digest(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink`."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)


def _blob(out: Path, data: bytes, media_type: str) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (out / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def normalised_layer(rootfs: Path, out: Path, epoch: int) -> tuple[dict[str, Any], str]:
    """The rootfs as one gzipped layer: (its descriptor, the uncompressed diff_id)."""
    tmp = out / "blobs" / "sha256" / "layer.tmp"
    with rootfs.open("rb") as src, tarfile.open(fileobj=src, mode="r:") as tin:
        members = sorted(tin.getmembers(), key=lambda m: m.name.lstrip("./") or ".")
        with tmp.open("wb") as raw:
            compressed = _Digest(raw)
            # mtime=0 and no file name: the gzip header carries nothing of this build.
            with gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=6, mtime=0) as gz:
                uncompressed = _Digest(gz)  # type: ignore[arg-type]
                with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as t:
                    for m in members:
                        name = m.name.lstrip("./")
                        if m.ischr() or m.isblk() or (name.startswith("dev/") and not m.isdir()):
                            continue
                        m.name = name or "."
                        m.mtime = min(int(m.mtime), epoch)
                        m.uname = m.gname = ""
                        m.pax_headers = {}
                        if m.isfile():
                            t.addfile(m, tin.extractfile(m))
                        else:
                            t.addfile(m)
    digest = compressed.sha.hexdigest()
    tmp.rename(out / "blobs" / "sha256" / digest)
    descriptor = {"mediaType": LAYER, "digest": f"sha256:{digest}", "size": compressed.size}
    return descriptor, f"sha256:{uncompressed.sha.hexdigest()}"


def build(
    rootfs: Path,
    out: Path,
    *,
    ref: str,
    epoch: int,
    env: list[str],
    user: str,
    workdir: str,
    cmd: list[str],
    labels: dict[str, str],
) -> str:
    """Write the layout into `out` (emptied first); returns the manifest's digest."""
    if out.exists():
        for p in sorted(out.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
    (out / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    layer, diff_id = normalised_layer(rootfs, out, epoch)
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "Env": env,
            "User": user,
            "WorkingDir": workdir,
            "Cmd": cmd,
            "ExposedPorts": {"8000/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "deploy/image/build.sh"}],
    }
    config_desc = _blob(out, _canonical(config), CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_desc,
        "layers": [layer],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_desc = _blob(out, _canonical(manifest), MANIFEST)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{**manifest_desc, "annotations": {"org.opencontainers.image.ref.name": ref}}],
    }
    (out / "index.json").write_bytes(_canonical(index))
    (out / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": "1.0.0"}))
    return str(manifest_desc["digest"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rootfs", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--ref", required=True, help="the tag inside the layout, e.g. 0.1.0")
    p.add_argument("--created", type=int, required=True, help="SOURCE_DATE_EPOCH")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--user", default="10001")
    p.add_argument("--workdir", default="/app")
    p.add_argument("--cmd", nargs=argparse.REMAINDER, default=[])
    args = p.parse_args(argv)
    labels = dict(item.split("=", 1) for item in args.label)
    digest = build(
        args.rootfs,
        args.out,
        ref=args.ref,
        epoch=args.created,
        env=args.env,
        user=args.user,
        workdir=args.workdir,
        cmd=args.cmd,
        labels=labels,
    )
    print(digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
