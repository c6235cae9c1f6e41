from __future__ import annotations

import shutil

import pytest
from tmc_agent import shim


@pytest.fixture(scope="session")
def shim_build(tmp_path_factory: pytest.TempPathFactory) -> shim.ShimBuild:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("no gcc/make to build the shim")
    return shim.build(tmp_path_factory.mktemp("alloc"), ("all", "asan", "memcheck", "tmctrace"))
