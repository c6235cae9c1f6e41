# The kubernetes client takes plain dicts for bodies at run time; its stubs say models only.
# mypy: disable-error-code="arg-type,no-untyped-call,union-attr"
"""A claim offering a recommendation's alternatives (scheduler/plugin/pkg/dra, `ClaimSpec`,
printed by `tmc-dra-slices --claim`), allocated by the stock kube-scheduler v1.36.3 from tmc's
slices on a real API server: the first alternative that fits the node, taken whole (its ways,
its DRAM and its slow memory), never one alternative's ways with another's memory, and none
when no alternative fits whole. The control: the same claim without its constraints is given
exactly such a mix."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.scheduler.controlplane import Unavailable, unavailable
from tests.scheduler.controlplane import cluster as c
from tests.scheduler.test_dra_objects import (
    GROUP,
    TENANT,
    VERSION,
    Plane,
    allocated,
    build_slices_command,
    install_dra,
    pod_with_claim,
    settle,
    slices_for,
    start_stock_scheduler,
    started,
)

pytestmark = pytest.mark.slow

GIB = 2**30
MIB = 2**20
# One node like the paper's §4.1 machine: 48 ways, 24 GiB of DRAM, 128 GiB of its own slow memory.
NODE: dict[str, Any] = {
    "nodes": [
        {
            "name": "node-a",
            "capacity": {"dram_bytes": 24 * GIB, "slow_bytes": 128 * GIB, "llc_ways": 48},
        }
    ],
    "generation": 1,
}
# Preferred: 40 ways with little DRAM and some slow memory; else 4 ways with 20 GiB all in DRAM.
ALTERNATIVES = [
    {"llc_ways": 40, "dram_bytes": 2 * GIB, "slow_bytes": 1 * GIB},
    {"llc_ways": 4, "dram_bytes": 20 * GIB, "slow_bytes": 0},
]


@pytest.fixture(scope="module")
def command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_slices_command(tmp_path_factory.mktemp("dra-claims"))
    except Unavailable as exc:
        unavailable(exc)


def claim_spec(binary: Path, alternatives: list[dict[str, Any]]) -> dict[str, Any]:
    done = subprocess.run(
        [str(binary), "--claim"],
        input=json.dumps({"alternatives": alternatives}),
        check=True,
        capture_output=True,
        text=True,
    )
    spec: dict[str, Any] = json.loads(done.stdout)
    return spec


@pytest.fixture(scope="module")
def plane(command: Path) -> Iterator[Plane]:
    cp = started()
    try:
        c.install_rbac(cp)
        admin = c.core(cp)
        c.register_node(admin, c.node_object("node-a"))
        admin.create_namespace({"metadata": {"name": TENANT}})
        c.ensure_default_account(admin, TENANT)
        made = Plane(cp, slices_for(command, NODE))
        install_dra(made)
        start_stock_scheduler(cp)
        yield made
    finally:
        cp.close()


def place(plane: Plane, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": spec,
    }
    plane.api.create_namespaced_custom_object(GROUP, VERSION, TENANT, "resourceclaims", body)
    c.core(plane.cp).create_namespaced_pod(TENANT, pod_with_claim(name))


def taken(plane: Plane, name: str) -> dict[str, tuple[str, str, str]]:
    """Each request's (subrequest, device, ways or bytes consumed) in the claim's allocation."""
    out: dict[str, tuple[str, str, str]] = {}
    for r in allocated(plane, name):
        request, _, sub = r["request"].partition("/")
        consumed = r.get("consumedCapacity", {})
        out[request] = (sub, r["device"], consumed.get("ways", consumed.get("bytes", "")))
    return out


def test_the_claim_spec_keeps_to_the_apis_limits(command: Path) -> None:
    """Four alternatives, the most a claim offers: 24 constraints of the API's 32, and a fifth is
    refused with the reason."""
    four = [
        {"llc_ways": w, "dram_bytes": d * GIB, "slow_bytes": s * GIB}
        for w, d, s in ((20, 4, 4), (12, 6, 2), (4, 8, 0), (1, 8, 0))
    ]
    spec = claim_spec(command, four)
    assert [r["name"] for r in spec["devices"]["requests"]] == ["ways", "dram", "slow"]
    assert len(spec["devices"]["constraints"]) == 24
    done = subprocess.run(
        [str(command), "--claim"],
        input=json.dumps({"alternatives": [*four, {"llc_ways": 2, "dram_bytes": 1}]}),
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "1..4 alternatives, not 5" in done.stderr


def test_kube_scheduler_takes_the_first_alternative_that_fits_whole(
    plane: Plane, command: Path
) -> None:
    """first: the preferred alternative (40 ways, 2 GiB DRAM, 1 GiB slow). second: 40 ways no
    longer fit, so the second (4 ways, 20 GiB all DRAM, its last MiB through the slow request).
    third: the first alternative's ways no longer fit (4 of the node's 48 are left) and the
    second's DRAM does not (2 GiB are left), though the second's 4 ways with the first's memory
    would: it is given nothing. The control, the same claim without its constraints, is given
    exactly that mix, and takes the node's last 4 ways."""
    spec = claim_spec(command, ALTERNATIVES)
    place(plane, "first", spec)
    assert settle(plane, ["first"], 1) == {"first": "node-a"}
    first = taken(plane, "first")
    assert first["ways"] == ("c0", "ways", "40")
    assert first["dram"] == ("c0", "dram", "2Gi")
    assert first["slow"] == ("c0", "slow", "1Gi")

    place(plane, "second", spec)
    settle(plane, ["first", "second"], 2)
    second = taken(plane, "second")
    assert second["ways"] == ("c1", "ways", "4")
    assert second["dram"] == ("c1", "dram", f"{20 * 1024 - 1}Mi")
    assert second["slow"] == ("c1", "dram", "1Mi")

    place(plane, "third", spec)
    settle(plane, ["first", "second", "third"], 2)
    unconstrained = {"devices": {"requests": spec["devices"]["requests"]}}
    place(plane, "mixed", unconstrained)
    settle(plane, ["first", "second", "third", "mixed"], 3)
    mixed = taken(plane, "mixed")
    assert {request: sub for request, (sub, _, _) in mixed.items()} == {
        "ways": "c1",
        "dram": "c0",
        "slow": "c0",
    }
    assert mixed["ways"] == ("c1", "ways", "4")

    # The node's 48 ways are all taken (40 + 4 + 4): one way more is never given.
    place(plane, "one-more", claim_spec(command, [{"llc_ways": 1, "dram_bytes": MIB}]))
    assert settle(plane, ["first", "second", "third", "mixed", "one-more"], 3) == {
        "first": "node-a",
        "second": "node-a",
        "mixed": "node-a",
    }
