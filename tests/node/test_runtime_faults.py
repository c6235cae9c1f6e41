"""Faults on the real runtime: the plugin down while containers are created, the runtime
restarted. (A malformed placement is in test_runtime.py.)

What happens when the plugin is down, and why: containerd creates a container with the NRI
plugins that are connected at that moment and does not wait for one that is not (an NRI plugin
is optional unless the runtime's validator names it as required), so a container created while
tmc-nri is down is created unadjusted. When the plugin connects again, the runtime hands it every
pod and container (Synchronize): the plugin learns again what placed pods hold on the node, so
the node's check keeps refusing overlaps, and for a container it never saw it corrects what the
runtime can change in place (memory limit, memory nodes), reports the rest on the pod (its plan,
shim and ways need a new container), and writes no record, so its run is never reported as a
verification run."""

from __future__ import annotations

import signal
import time

import pytest

from model import node_contract as contract
from tests.node.conftest import Node, PluginFactory, wait_registered
from tests.node.test_runtime import create, env_of, placed, tmc_mounts, uid

pytestmark = pytest.mark.slow  # a real containerd, built once per machine


def test_container_created_while_the_plugin_is_down_is_corrected_and_reported(
    node: Node, start_plugin: PluginFactory
) -> None:
    plugin = start_plugin()
    plugin.stop()
    # containerd notices the plugin is gone when its connection closes.
    time.sleep(0.5)
    cid = create(node, "late", 20, placed("0x3", 2, 96 << 20))
    spec = node.runtime.spec(cid)
    assert tmc_mounts(spec) == {} and "TMC_PLAN" not in env_of(spec)
    assert "memory" not in spec["linux"]["resources"]

    plugin = start_plugin()
    spec = node.runtime.spec(cid)
    assert spec["linux"]["resources"]["memory"]["limit"] == 96 << 20
    assert spec["linux"]["resources"]["cpu"]["mems"] == "0"
    events = plugin.events()
    assert [e["reason"] for e in events] == ["TmcNotApplied"]
    assert "created while tmc's node plugin was not running" in events[0]["message"]
    assert plugin.metrics()['tmc_nri_containers_total{outcome="late"}'] == 1
    assert not (node.plans / "applied" / uid(20)).exists()
    # Its ways are held again: an overlapping pod is refused.
    ann = placed("0x2", 1, 64 << 20)
    pod = node.runtime.run_pod("over", uid(21), ann)
    done = node.runtime.create(pod, "over", uid(21), ann, "over", check=False)
    assert done.returncode != 0 and "overlaps default/late's 0x3" in done.stderr


def test_a_pod_that_requires_the_plugin_is_refused_while_it_is_down_then_configured(
    node: Node, start_plugin: PluginFactory
) -> None:
    """The scheduler binds placed pods with NRI's required-plugins annotation naming tmc-nri
    (where the chart says the nodes run it): while the plugin is down the runtime's validator
    refuses the pod's containers, with the reason, and the kubelet's retry, once the plugin is
    back, creates them configured. A pod that does not ask is created as before."""
    ann = {**placed("0x30", 2, 64 << 20), "required-plugins.noderesource.dev/pod": '["tmc"]'}
    plugin = start_plugin()
    plugin.stop()
    time.sleep(0.5)
    pod = node.runtime.run_pod("strict", uid(30), ann)
    refused = node.runtime.create(pod, "strict", uid(30), ann, "strict", check=False)
    assert refused.returncode != 0
    # crictl quotes the runtime's message, escaping its quotes.
    assert 'required plugin "tmc" not present' in refused.stderr.replace('\\"', '"')
    plain = create(node, "plain", 31, {})  # not tmc's, asks for nothing: created
    assert "TMC_PLAN" not in env_of(node.runtime.spec(plain))

    start_plugin()
    cid = node.runtime.create(pod, "strict", uid(30), ann, "strict").stdout.strip()
    spec = node.runtime.spec(cid)
    assert spec["linux"]["resources"]["memory"]["limit"] == 64 << 20
    assert env_of(spec)["TMC_PLAN"] and tmc_mounts(spec)


def test_runtime_restart_keeps_the_node_check_and_the_plugin_reconnects(
    node: Node, start_plugin: PluginFactory
) -> None:
    plugin = start_plugin()
    create(node, "held", 22, placed("0xc", 2, 64 << 20))
    node.runtime.stop()
    node.runtime.start()
    # The plugin connects again by itself (it retries every second) and is resynchronised.
    deadline = time.monotonic() + 20
    while plugin.log.read_text().count("Started plugin") < 2:
        assert time.monotonic() < deadline, plugin.log.read_text()
        time.sleep(0.1)
    wait_registered(node.runtime, plugin)
    ann = placed("0x4", 1, 64 << 20)
    pod = node.runtime.run_pod("stale", uid(23), ann)
    done = node.runtime.create(pod, "stale", uid(23), ann, "stale", check=False)
    assert done.returncode != 0 and "overlaps default/held's 0xc" in done.stderr
    cid = create(node, "fresh", 24, placed("0x30", 2, 64 << 20))
    assert env_of(node.runtime.spec(cid))["TMC_PLAN"] == "/run/tmc/plan"
    assert contract.parse_plan_file((node.plans / f"{uid(24)}.plan").read_text()).fast_node == 0


def test_a_hung_plugin_delays_creation_by_the_request_timeout_then_is_dropped(
    node: Node, start_plugin: PluginFactory
) -> None:
    """A plugin that stops answering (stuck, or stopped mid-restart): containerd waits its NRI
    request timeout (2 s here and by default), drops the plugin and creates the container
    without it; the containers created meanwhile are reported once it is back."""
    plugin = start_plugin()
    assert plugin.proc is not None
    ann = placed("0x3", 2, 64 << 20)
    pod = node.runtime.run_pod("hung", uid(25), ann)
    plugin.proc.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        first = node.runtime.create(pod, "hung", uid(25), ann, "first").stdout.strip()
        waited = time.monotonic() - start
        second = node.runtime.create(pod, "hung", uid(25), ann, "second").stdout.strip()
    finally:
        plugin.proc.send_signal(signal.SIGCONT)
    assert 1.9 < waited < 10, waited
    for cid in (first, second):
        assert "TMC_PLAN" not in env_of(node.runtime.spec(cid))
    deadline = time.monotonic() + 20
    while len([e for e in plugin.events() if "was not running" in e["message"]]) < 2:
        assert time.monotonic() < deadline, plugin.log.read_text()[-2000:]
        time.sleep(0.1)
    assert not (node.plans / "applied" / uid(25)).exists()
