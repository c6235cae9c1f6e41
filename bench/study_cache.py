"""An optional on-disk cache of per-workload studies, for iterating on the cluster study.

A study (ground-truth grid, fits, tmc's placement runs) depends only on the workload as
simulated (its full specification after any trimming or reshaping), the host, the seeds and
repeats, the price profile, and the code of the simulator, the model and the benchmark. The key
is a SHA-256 over all of these, the code as the bytes of every Python file of `sim`, `model` and
`bench`: any edit there starts a fresh cache. Entries are pickles written by this machine's own
runs (write to a temporary name, then rename); a folder of someone else's pickles must not be
given, since loading a pickle runs code. Off unless `tmc bench --cache DIR` asks for it, and a
run that used it says so in its JSON.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
_PACKAGES = ("sim", "model", "bench")


@cache
def code_version() -> str:
    """SHA-256 over the Python sources of the packages a study runs."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def study_key(*parts: str) -> str:
    h = hashlib.sha256(code_version().encode())
    for p in parts:
        h.update(b"\0")
        h.update(p.encode())
    return h.hexdigest()


def cached(folder: Path | None, parts: tuple[str, ...], compute: Callable[[], T]) -> T:
    """`compute()`, or its result from an earlier run with the same key in `folder`."""
    if folder is None:
        return compute()
    path = folder / f"{study_key(*parts)}.pkl"
    if path.exists():
        with path.open("rb") as f:
            out: T = pickle.load(f)  # this machine's own cache (see above)
        return out
    value = compute()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)
    return value
