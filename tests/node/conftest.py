"""Fixtures for the node tests: a real containerd with NRI and Debian's runc, and the tmc-nri
plugin registered over NRI's socket (tests/node/runtime/harness.py)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tmc_agent import shim

from tests.node.runtime import harness


@dataclass
class Node:
    runtime: harness.Containerd
    base: Path
    plugin_binary: Path
    plans: Path
    shim_dir: Path


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    # No skip: a machine without runc or a compiler fails here, saying which is missing.
    assert Path(harness.RUNC).is_file(), "runc is not installed: ./dev installs Debian's runc"
    assert shutil.which("gcc"), "gcc is not installed: ./dev installs it"
    bin_dir = harness.build_runtime()
    base = tmp_path_factory.mktemp("node")
    plugin_binary = harness.build_plugin(base / "bin")
    image = harness.build_image(base / "image")
    plans, shim_dir = base / "plans", base / "shim"
    plans.mkdir()
    shim.install(shim.build(base / "shim-build"), shim_dir)
    runtime = harness.Containerd(bin_dir, base / "containerd")
    runtime.start()
    try:
        runtime.ctr("images", "import", "--base-name", harness.IMAGE.split(":")[0], str(image))
        yield Node(runtime, base, plugin_binary, plans, shim_dir)
    finally:
        runtime.remove_pods()
        runtime.stop()
        harness.remove_empty_cgroups("k8s.io")


PluginFactory = Callable[..., harness.Plugin]


@pytest.fixture
def start_plugin(node: Node, tmp_path: Path) -> Iterator[PluginFactory]:
    started: list[harness.Plugin] = []

    def start(
        sys_root: str = "/sys",
        resctrl: str = "",
        kubeconfig: str = "none",
        dra_checkpoint: str = "",
        seal_keys: str = "",
    ) -> harness.Plugin:
        plugin = harness.Plugin(
            binary=node.plugin_binary,
            socket=node.runtime.nri_sock,
            plans=node.plans,
            shim_dir=node.shim_dir,
            sys_root=sys_root,
            resctrl=resctrl,
            kubeconfig=kubeconfig,
            dra_checkpoint=dra_checkpoint,
            seal_keys=seal_keys,
            log=tmp_path / f"tmc-nri-{len(started)}.log",
        )
        plugin.start()
        started.append(plugin)
        wait_registered(node.runtime, plugin)
        return plugin

    yield start
    for plugin in started:
        plugin.stop()
    node.runtime.remove_pods()


def wait_registered(runtime: harness.Containerd, plugin: harness.Plugin) -> None:
    """Until containerd says the plugin registered (its log), so that the next container is
    created with it."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert plugin.proc is not None and plugin.proc.poll() is None, plugin.log.read_text()
        if "Started plugin" in plugin.log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"tmc-nri did not register:\n{plugin.log.read_text()}")
