"""The byte-level node list (scheduler.nodelist) answers exactly as the full parse does: same
nodes kept, same reasons, same scores, for every list it accepts; and it declines every body that
is not in kube-scheduler's own layout, which then takes the full path."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from ledger.types import Held, NodeCapacity
from model.resources import GIB
from scheduler.decisions import Recommended, Recommender
from scheduler.extender import Extender
from scheduler.nodelist import NameTable, NodeNames, split_request
from scheduler.state import ClusterState
from tests.scheduler.conftest import RecordingCluster

WIRE = Path(__file__).parent / "wire"
DNS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-."


def pod(opted_in: bool = True, uid: str = "uid-1") -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "2", "memory": "4Gi"}}
    if opted_in:
        resources["requests"]["tmc.dev/tiered"] = "1"
        resources["limits"] = {"tmc.dev/tiered": "1"}
    return {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": uid,
            "annotations": {"tmc.dev/workload": "graph500"},
        },
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def extender_for(nodes: list[NodeCapacity], held: list[Held], ways: int = 4) -> Extender:
    state = ClusterState()
    state.set_pool("rack-0", 64 * GIB)
    for node in nodes:
        state.upsert_node(node)
    for h in held:
        state.hold(h)
    no_db = cast(sessionmaker[Session], None)  # the recommendation is cached
    recommender = Recommender(no_db, state.utilization, ttl_seconds=3600)
    recommender.remember(
        "graph500",
        "cheapest",
        Recommended(2, 3 * GIB, 2 * GIB, 0.4, ways, "r", time.monotonic()),
    )
    return Extender(state, recommender, RecordingCluster())


def node(name: str, i: int, ready: bool = True) -> NodeCapacity:
    pooled = i % 3 == 0
    return NodeCapacity(
        name=name,
        host_kind="k",
        cpus=[1, 4, 12][i % 3],
        dram_bytes=[2, 8, 24][i % 3] * GIB,
        slow_bytes=0 if pooled else [1, 32, 128][i % 3] * GIB,
        llc_ways=[2, 11, 48][i % 3],
        pool="rack-0" if pooled else None,
        ready=ready,
    )


def both_ways(extender: Extender, request: dict[str, Any]) -> None:
    """The byte path takes the request and answers as the full path does."""
    raw = orjson.dumps(request)  # compact, as Go's encoder writes it
    assert split_request(raw) is not None, "the byte path must take this body"
    fast, failed = extender.filter_bytes(raw)
    full = extender.filter(orjson.loads(raw))
    assert orjson.loads(fast) == full
    assert failed == bool(full["Error"])
    assert orjson.loads(extender.prioritize_bytes(raw)) == orjson.loads(
        extender.prioritize_json(orjson.loads(raw))
    )
    # Prioritize over the nodes filter kept, as kube-scheduler sends it (the filter's answer is
    # reused then): the same scores as the full parse.
    kept = {**request, "NodeNames": orjson.loads(fast)["NodeNames"] or []}
    raw_kept = orjson.dumps(kept)
    assert orjson.loads(extender.prioritize_bytes(raw_kept)) == orjson.loads(
        extender.prioritize_json(orjson.loads(raw_kept))
    )


names_st = st.text(DNS_CHARS, min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    known=st.lists(names_st, min_size=0, max_size=30, unique=True),
    unknown=st.lists(names_st, max_size=5),
    order=st.randoms(use_true_random=False),
    used=st.lists(st.integers(0, 29), max_size=20),
    ready=st.lists(st.booleans(), min_size=30, max_size=30),
    ways=st.integers(1, 64),
    opted=st.booleans(),
)
def test_byte_path_equals_full_parse(
    known: list[str],
    unknown: list[str],
    order: Any,
    used: list[int],
    ready: list[bool],
    ways: int,
    opted: bool,
) -> None:
    nodes = [node(n, i, ready[i]) for i, n in enumerate(known)]
    held = []
    for k, i in enumerate(used):
        if i < len(nodes) and nodes[i].cpus >= 2:
            held.append(
                Held(
                    f"h{k}",
                    "default",
                    f"h{k}",
                    nodes[i].name,
                    1,
                    GIB,
                    GIB,
                    i % 3 == 0,
                    1 << (k % 2),
                )
            )
    extender = extender_for(nodes, held, ways)
    asked = known + unknown + known[:3]  # unknown names and repeats too
    order.shuffle(asked)
    both_ways(extender, {"Pod": pod(opted), "Nodes": None, "NodeNames": asked})


def test_every_node_full_is_an_error_on_both_paths() -> None:
    nodes = [node(f"n{i}", 2) for i in range(4)]
    held = [Held(f"h{i}", "default", f"h{i}", f"n{i}", 11, GIB, GIB, False, 1) for i in range(4)]
    extender = extender_for(nodes, held)
    request = {"Pod": pod(), "Nodes": None, "NodeNames": ["n0", "n1", "n2", "n3", "stranger"]}
    both_ways(extender, request)
    answer, failed = extender.filter_bytes(orjson.dumps(request))
    assert failed and b"no node has room" in answer


def test_empty_list_and_pod_without_tiered_memory() -> None:
    extender = extender_for([node("a", 1)], [])
    both_ways(extender, {"Pod": pod(), "Nodes": None, "NodeNames": []})
    both_ways(extender, {"Pod": pod(opted_in=False), "Nodes": None, "NodeNames": ["a", "zz"]})


def test_a_real_scheduler_request_takes_the_byte_path() -> None:
    raw = (WIRE / "filter-nodenames.request.json").read_bytes().strip()
    split = split_request(raw)
    assert split is not None
    head, names = split
    assert head["Pod"]["metadata"]["name"] == "probe-1"
    assert names.texts(np.arange(names.count)) == orjson.loads(raw)["NodeNames"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"Pod":{},"Nodes":null,"NodeNames": ["a"]}',  # whitespace
        b'{"Pod":{},"Nodes":null,"NodeNames":["a" ,"b"]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a\\"b"]}',  # an escape
        b'{"Pod":{},"Nodes":null,"NodeNames":["\xc3\xa9"]}',  # not ASCII
        b'{"Pod":{},"Nodes":null,"NodeNames":["a\tb"]}',  # a control character
        b'{"Pod":{},"Nodes":null,"NodeNames":["a"]}\n',  # trailing bytes
        b'{"Pod":{},"Nodes":null,"NodeNames":null}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a",]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":["a""b"]}',
        b'{"Pod":{},"Nodes":null,"NodeNames":[1]}',
        b'{,"NodeNames":["a"]}',  # the head alone is `{}`, the whole is not JSON
        b'{"Pod":{"x":",\\"NodeNames\\":["},"NodeNames":["a"]}x',
        b'{"Pod":{"x":"],"NodeNames":["a"]}',  # the cut falls inside a string
        b'{"Pod":{"NodeNames":["a"]}',  # inside a nested object, unbalanced
        b'["Pod",{"NodeNames":["a"]}',
    ],
)
def test_bodies_not_in_the_encoders_layout_take_the_full_path(raw: bytes) -> None:
    assert split_request(raw) is None


def test_the_cut_is_the_last_node_names_key() -> None:
    raw = b'{"Pod":{"x":"\\",\\"NodeNames\\":[\\"evil\\"]}"},"Nodes":null,"NodeNames":["a","b"]}'
    split = split_request(raw)
    assert split is not None
    head, names = split
    assert "NodeNames" not in head and head["Pod"] == orjson.loads(raw)["Pod"]
    assert names.texts(np.arange(names.count)) == ["a", "b"]


def test_name_table_is_exact() -> None:
    """Names that share their first words, names longer than any known one, and many names:
    each is found at its own slot or not at all."""
    known = [f"node-{i:05d}" for i in range(3000)] + ["x" * 253, "a" * 8, "a" * 9, "a" * 16]
    table = NameTable(known, list(range(100, 100 + len(known))))
    asked = [*known[::-1], "a" * 7, "a" * 17, "x" * 254, "node-3000", "node-0000", "zz"]
    listed = orjson.dumps(asked)
    names = NodeNames.parse(np.frombuffer(listed, dtype=np.uint8))
    assert names is not None
    expected = [100 + known.index(n) if n in known else -1 for n in asked]
    assert table.positions(names).tolist() == expected


def test_answers_are_valid_json_for_names_of_every_length() -> None:
    known = ["a" * k for k in range(1, 70)]
    extender = extender_for([node(n, i) for i, n in enumerate(known)], [])
    both_ways(extender, {"Pod": pod(), "Nodes": None, "NodeNames": [*known, "b" * 300]})


def test_a_node_that_joins_is_found_by_the_byte_path() -> None:
    extender = extender_for([node("a", 1)], [])
    request = {"Pod": pod(), "Nodes": None, "NodeNames": ["a", "b"]}
    first, _ = extender.filter_bytes(orjson.dumps(request))
    assert orjson.loads(first)["NodeNames"] == ["a"]
    extender.state.upsert_node(node("b", 1))
    again, _ = extender.filter_bytes(orjson.dumps(request))
    assert orjson.loads(again)["NodeNames"] == ["a", "b"]
    extender.state.replace_all([node("b", 1)], {}, [])
    last, _ = extender.filter_bytes(orjson.dumps(request))
    assert orjson.loads(last)["NodeNames"] == ["b"]


def test_prioritize_reuses_filters_answer_only_while_the_nodes_are_the_same() -> None:
    extender = extender_for([node("a", 1), node("b", 2)], [])
    request = {"Pod": pod(), "Nodes": None, "NodeNames": ["a", "b", "zz"]}
    answer, _ = extender.filter_bytes(orjson.dumps(request))
    kept = orjson.loads(answer)["NodeNames"]
    assert kept == ["a", "b"]
    prioritize = orjson.dumps({**request, "NodeNames": kept})
    first = orjson.loads(extender.prioritize_bytes(prioritize))
    # The cache is rebuilt with other slots for the same names: the kept slots are stale, and
    # prioritize must look the names up again.
    extender.state.replace_all([node("c", 0), node("b", 2), node("a", 1)], {}, [])
    again = orjson.loads(extender.prioritize_bytes(prioritize))
    assert again == first == orjson.loads(extender.prioritize_json(orjson.loads(prioritize)))
    # A list another filter narrowed further is not the kept one.
    narrowed = orjson.dumps({**request, "NodeNames": ["b"]})
    assert orjson.loads(extender.prioritize_bytes(narrowed)) == [
        {"Host": "b", "Score": first[1]["Score"]}
    ]
