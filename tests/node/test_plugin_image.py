"""tmc-nri's image (deploy/image/nri-image.sh) as the node DaemonSet runs it: built twice with
the same digest, imported into the real runtime, run through the CRI API with the DaemonSet's
host paths (the NRI socket, the plan and shim directories at their host paths, sysfs read-only)
and the environment the chart sets, and adjusting the next placed container."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.node.conftest import Node
from tests.node.test_runtime import create, env_of, placed

pytestmark = pytest.mark.slow  # a real containerd, built once per machine

ROOT = Path(__file__).resolve().parents[2]


def layer(layout: Path) -> bytes:
    """The image's one layer, uncompressed."""
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads(
        (blobs / index["manifests"][0]["digest"].removeprefix("sha256:")).read_text()
    )
    (entry,) = manifest["layers"]
    return gzip.decompress((blobs / entry["digest"].removeprefix("sha256:")).read_bytes())


def build(out: Path, tmp: Path) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "image" / "nri-image.sh"), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    name, digest = done.stdout.split()
    assert name == "tmc-nri"
    return digest


def test_the_image_runs_as_the_daemonset_runs_it(node: Node, tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    first = build(tmp_path / "a", tmp_path / "tmp")
    assert build(tmp_path / "b", tmp_path / "tmp") == first
    assert list((tmp_path / "tmp").iterdir()) == [], "the builds left their work behind"
    layout = tmp_path / "a" / "image-tmc-nri"
    # The chart runs tmc-dra-node from this image too (dra.nodePlugin).
    with tarfile.open(fileobj=io.BytesIO(layer(layout))) as t:
        for binary in ("tmc-nri", "tmc-dra-node"):
            assert t.getmember(f"usr/local/bin/{binary}").mode & 0o111, binary
    packed = tmp_path / "tmc-nri.tar"
    with tarfile.open(packed, "w") as t:
        t.add(layout, arcname=".")
    node.runtime.ctr("images", "import", "--base-name", "tmc.test/tmc-nri", str(packed))
    ref = json.loads((layout / "index.json").read_text())["manifests"][0]["annotations"][
        "org.opencontainers.image.ref.name"
    ]

    runtime = node.runtime
    # A node whose agent could not build the shim: the plugin installs the one its image carries.
    shim_dir = tmp_path / "node-shim"
    shim_dir.mkdir()
    socket_dir = runtime.nri_sock.parent
    pod = runtime.run_pod("tmc-agent-node-a", "6f1c2a9e-0000-4000-8000-000000000040", {})
    config = {
        "metadata": {"name": "nri"},
        "image": {"image": f"tmc.test/tmc-nri:{ref}"},
        "envs": [
            {"key": k, "value": v}
            for k, v in {
                "TMC_NRI_NODE_NAME": "node-a",
                "TMC_NRI_SOCKET": str(runtime.nri_sock),
                "TMC_NRI_SYS": "/host/sys",
                "TMC_NRI_RESCTRL": "/sys/fs/resctrl",
                "TMC_NRI_PLAN_DIR": str(node.plans),
                "TMC_NRI_SHIM_DIR": str(shim_dir),
                "TMC_NRI_METRICS": ":0",
                "TMC_NRI_KUBECONFIG": "none",
            }.items()
        ],
        "mounts": [
            {"container_path": str(socket_dir), "host_path": str(socket_dir)},
            {"container_path": "/host/sys", "host_path": "/sys", "readonly": True},
            {"container_path": str(node.plans), "host_path": str(node.plans)},
            {"container_path": str(shim_dir), "host_path": str(shim_dir)},
        ],
        # The chart's securityContext: root, no capability, a read-only root filesystem.
        "linux": {
            "security_context": {
                "readonly_rootfs": True,
                "no_new_privs": True,
                "capabilities": {"drop_capabilities": ["ALL"]},
            }
        },
        "log_path": "nri.log",
    }
    config_path = tmp_path / "nri.json"
    config_path.write_text(json.dumps(config))
    pod_path = runtime.base / "pod-6f1c2a9e-0000-4000-8000-000000000040.json"
    cid = runtime.crictl("create", pod, str(config_path), str(pod_path)).stdout.strip()
    caps = runtime.spec(cid)["process"].get("capabilities") or {}
    assert not any(caps.get(kind) for kind in ("bounding", "effective", "permitted")), caps
    runtime.crictl("start", cid)
    deadline = time.monotonic() + 20
    # containerd's log line: plugin "external:50-tmc[pid]" registered as "50-tmc" (quotes escaped)
    while 'registered as \\"50-tmc\\"' not in runtime.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, runtime.crictl("logs", cid).stderr[-2000:]
        time.sleep(0.1)
    try:
        placed_cid = create(node, "from-image", 41, placed("0x3", 2, 64 << 20))
        env = env_of(runtime.spec(placed_cid))
        assert env["TMC_PLAN"] == "/run/tmc/plan"
        assert env["LD_PRELOAD"] == "/run/tmc/libtmcalloc.so"
        assert (node.plans / "6f1c2a9e-0000-4000-8000-000000000041.plan").is_file()
        installed = shim_dir / "libtmcalloc.so"
        with tarfile.open(fileobj=io.BytesIO(layer(layout))) as t:
            member = t.extractfile("usr/local/lib/tmc/libtmcalloc.so")
            assert member is not None and installed.read_bytes() == member.read()
        # And the process maps it: the probe, run to its end.
        logs = runtime.run_to_end(placed_cid)
        assert "shim-mapped 1" in logs
    finally:
        runtime.remove_pods()
