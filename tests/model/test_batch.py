"""model.batch: small instances whose optimum is known, pools, and the greedy fallback."""

from __future__ import annotations

import numpy as np

from model.batch import BatchRequest, Machines, greedy, solve

GIB = 1 << 30


def req(
    *demands: tuple[int, int, int, int], costs: list[float] | None = None, greedy_choice: int = 0
) -> BatchRequest:
    d = np.asarray(demands, dtype=np.int64)
    c = np.asarray(costs if costs is not None else [1.0] * len(d), dtype=np.float64)
    return BatchRequest(demand=d, cost=c, greedy=greedy_choice)


def machines(n: int, cpus: int = 12, dram: int = 24, slow: int = 128, ways: int = 48) -> Machines:
    free = np.tile(np.asarray([cpus, dram * GIB, slow * GIB, ways], dtype=np.int64), (n, 1))
    return Machines(free=free, in_use=np.zeros(n, dtype=bool))


def test_choice_of_shape_packs_onto_one_machine() -> None:
    # Two requests, each may take 16 GiB DRAM (cheaper) or 8 GiB DRAM + 8 GiB slow (dearer).
    # Greedy (the cheaper shape for both) needs two machines; the joint optimum fits one
    # machine with one request in each shape.
    rich = (4, 16 * GIB, 0, 4)
    lean = (4, 8 * GIB, 8 * GIB, 4)
    r = [req(rich, lean, costs=[1.0, 1.01]), req(rich, lean, costs=[1.0, 1.01])]
    g = greedy(r, machines(2))
    assert g.opened == 2
    res = solve(r, machines(2), time_limit_seconds=5.0)
    assert res.status == "optimal"
    assert res.opened == 1
    assert sorted(a[0] for a in res.assignments if a) == [0, 1]  # one of each: least cost
    assert len({a[1] for a in res.assignments if a}) == 1


def test_prefers_machines_already_in_use_then_cost() -> None:
    m = machines(3)
    m = Machines(free=m.free, in_use=np.asarray([False, True, False]))
    r = [req((4, GIB, 0, 2), (4, GIB, 0, 1), costs=[1.0, 1.5])]
    res = solve(r, m, time_limit_seconds=5.0)
    assert res.opened == 0
    assert res.assignments == [(0, 1)]


def test_unplaceable_request_is_left_out_not_failed() -> None:
    r = [req((4, GIB, 0, 2)), req((13, GIB, 0, 2))]
    res = solve(r, machines(2), time_limit_seconds=5.0)
    assert res.assignments[0] is not None
    assert res.assignments[1] is None


def test_rack_pool_is_shared_by_its_machines() -> None:
    # Two machines share a 10 GiB pool; each request needs 6 GiB slow, or 6 GiB DRAM instead.
    free = np.tile(np.asarray([12, 24 * GIB, 0, 48], dtype=np.int64), (2, 1))
    m = Machines(
        free=free,
        in_use=np.zeros(2, dtype=bool),
        pool=np.asarray([0, 0]),
        pool_free=np.asarray([10 * GIB]),
    )
    slow_shape = (4, 0, 6 * GIB, 4)
    dram_shape = (4, 6 * GIB, 0, 4)
    r = [req(slow_shape, dram_shape, costs=[1.0, 2.0]) for _ in range(2)]
    res = solve(r, m, time_limit_seconds=5.0)
    chosen = sorted(a[0] for a in res.assignments if a)
    assert chosen == [0, 1]  # the pool holds only one slow request


def test_falls_back_to_greedy_when_the_solver_has_no_time() -> None:
    rng = np.random.default_rng(0)
    reqs = [
        req(
            *[
                (
                    int(rng.integers(1, 5)),
                    int(rng.integers(1, 8)) * GIB,
                    int(rng.integers(0, 8)) * GIB,
                    int(rng.integers(1, 12)),
                )
                for _ in range(6)
            ]
        )
        for _ in range(30)
    ]
    res = solve(reqs, machines(40), time_limit_seconds=1e-6)
    assert res.status == "fallback"
    assert res == greedy(reqs, machines(40))
    assert all(a is not None and a[0] == 0 for a in res.assignments)


def test_empty_window() -> None:
    assert solve([], machines(1)).assignments == []
