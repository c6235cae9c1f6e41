"""Shared fixtures: one simulated tiering profile per workload (drawn once per session), and the
service fixtures (real PostgreSQL and Redis) for the API tests."""

from __future__ import annotations

import pytest

from model.tiering.profile import TieringProfile
from sim.machine import cxl_local_host, optane_host
from sim.tiering import STUDY_WORKLOADS, Stream, draw_stream, tiering_profile

_STREAMS: dict[tuple[str, int], Stream] = {}
_PROFILES: dict[tuple[str, str], TieringProfile] = {}


def stream(name: str, seed: int = 1) -> Stream:
    if (name, seed) not in _STREAMS:
        _STREAMS[(name, seed)] = draw_stream(STUDY_WORKLOADS[name](), seed)
    return _STREAMS[(name, seed)]


def profile(name: str, host: str = "cxl_local") -> TieringProfile:
    if (name, host) not in _PROFILES:
        h = cxl_local_host() if host == "cxl_local" else optane_host()
        _PROFILES[(name, host)] = tiering_profile(stream(name), h)
    return _PROFILES[(name, host)]


@pytest.fixture
def strided_profile() -> TieringProfile:
    return profile("strided")
