"""A representative access trace of a workload, generated once and reused by every configuration.

The trace is the interleaved stream of LLC accesses (L2 misses) of all the VM's threads: the LLC
partition is shared by them, so it sees all of it. It is a sequence of *visits*: a visit picks a
structure (with probability proportional to its access rate over its visit length) and reads the
lines of one object, one sweep burst, or one replayed offset. Instruction gaps between visits are
geometric with the mean that makes the workload's accesses per instruction come out right;
accesses inside a visit are `instructions_between_lines` apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from sim.kernels import DEP_CHAIN, DEP_SHIFT, DEP_SIBLING, FLAG_WRITE
from sim.workload import (
    CHUNK_BYTES,
    LINE_BYTES,
    HotSet,
    Stream,
    StructureSpec,
    TraceFile,
    Uniform,
    Workload,
    Zipf,
)

I64 = NDArray[np.int64]
F64 = NDArray[np.float64]


@dataclass(frozen=True)
class Trace:
    """Parallel arrays, one entry per access; the first `warmup` accesses only warm the cache."""

    gap: NDArray[np.int32]  # instructions since the previous access (>= 1)
    sid: NDArray[np.int16]  # structure index
    lines: I64  # global line number (structure base + line offset)
    flags: NDArray[np.uint8]  # store bit and dependence kind, see sim.kernels
    base: I64  # first global line of each structure
    size_lines: I64
    phase: F64  # per structure, decorrelates the page-interleave patterns
    warmup: int

    def __len__(self) -> int:
        return int(self.gap.shape[0])


def _visit_lines(spec: StructureSpec) -> int:
    p = spec.pattern
    if isinstance(p, Stream):
        return p.burst_lines * (1 + p.plane_reuses)
    if isinstance(p, TraceFile):
        return 1
    return min(spec.lines, max(1, math.ceil(p.object_bytes / LINE_BYTES)))


def _scatter(rng: np.random.Generator, n: int) -> tuple[int, int]:
    # An affine bijection of [0, n): rank -> (rank * mult + add) mod n scatters hot objects.
    if n <= 1:
        return 1, 0
    while True:
        mult = int(rng.integers(n // 3 + 1, n + n // 3 + 2)) | 1
        if math.gcd(mult, n) == 1:
            return mult % n or 1, int(rng.integers(0, n))


def _zipf_ranks(rng: np.random.Generator, n: int, a: float, size: int) -> I64:
    # Inverse CDF of the continuous power law on [1, n + 1): close to the discrete Zipf law and
    # O(1) per draw however large n is.
    u = rng.random(size)
    top = float(n + 1)
    if abs(a - 1.0) < 1e-9:
        x = np.power(top, u)
    else:
        e = 1.0 - a
        x = np.power((top**e - 1.0) * u + 1.0, 1.0 / e)
    ranks: I64 = np.clip(np.floor(x).astype(np.int64) - 1, 0, n - 1)
    return ranks


def _object_visits(rng: np.random.Generator, spec: StructureSpec, visits: int) -> I64:
    """First line (offset in the structure) of each visit's object."""
    p = spec.pattern
    assert isinstance(p, Uniform | Zipf | HotSet)
    obj_lines = _visit_lines(spec)
    n_obj = max(1, spec.lines // obj_lines)
    if isinstance(p, Uniform):
        objects = rng.integers(0, n_obj, size=visits, dtype=np.int64)
    else:
        if isinstance(p, Zipf):
            ranks = _zipf_ranks(rng, n_obj, p.exponent, visits)
        else:
            hot_n = min(n_obj, max(1, round(p.hot_fraction * n_obj)))
            ranks = rng.integers(0, hot_n, size=visits, dtype=np.int64)
            if hot_n < n_obj:
                cold = rng.random(visits) >= p.hot_share
                ranks[cold] = rng.integers(hot_n, n_obj, size=int(cold.sum()), dtype=np.int64)
        mult, add = _scatter(rng, n_obj)
        objects = (ranks * mult + add) % n_obj
    starts: I64 = objects * obj_lines
    return starts


def _object_offsets(rng: np.random.Generator, spec: StructureSpec, visits: int) -> I64:
    starts = _object_visits(rng, spec, visits)
    within = np.arange(_visit_lines(spec), dtype=np.int64)
    offsets: I64 = (starts[:, None] + within[None, :]).ravel()
    return offsets


def _stream_offsets(rng: np.random.Generator, spec: StructureSpec, visits: int) -> I64:
    p = spec.pattern
    assert isinstance(p, Stream)
    n = spec.lines
    m = np.arange(visits, dtype=np.int64)
    q = m % p.streams
    mq = m // p.streams
    if p.run_kib is None:
        starts = rng.integers(0, n, size=p.streams, dtype=np.int64)
        pos = starts[q] + mq * p.burst_lines
    else:
        run_lines = max(1, round(p.run_kib * 1024 / LINE_BYTES))
        per_run = max(1, run_lines // p.burst_lines)
        runs = int(mq.max()) // per_run + 1 if visits else 1
        run_start = rng.integers(0, n, size=(p.streams, runs), dtype=np.int64)
        pos = run_start[q, mq // per_run] + (mq % per_run) * p.burst_lines
    new = pos[:, None] + np.arange(p.burst_lines, dtype=np.int64)[None, :]  # [visit, burst]
    plane = round((p.plane_kib or 0.0) * 1024 / LINE_BYTES)
    back = np.arange(p.plane_reuses + 1, dtype=np.int64) * plane  # 0, P, 2P, ...
    offsets: I64 = ((new[:, :, None] - back[None, None, :]) % n).ravel()
    return offsets


def _replay_offsets(
    rng: np.random.Generator, spec: StructureSpec, visits: int, source_dir: str | None
) -> I64:
    p = spec.pattern
    assert isinstance(p, TraceFile)
    path = Path(p.path)
    if not path.is_absolute() and source_dir is not None:
        path = Path(source_dir) / path
    raw = np.load(path)
    if raw.ndim != 1 or raw.size == 0 or not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"{path}: a trace is a non-empty 1-D integer array of byte offsets")
    lines = np.clip(raw.astype(np.int64) // LINE_BYTES, 0, spec.lines - 1)
    begin = int(rng.integers(0, lines.size))
    offsets: I64 = lines[(begin + np.arange(visits, dtype=np.int64)) % lines.size]
    return offsets


def structure_bases(workload: Workload) -> I64:
    """First global line of each structure; each starts on a fresh 2 MiB chunk."""
    chunk_lines = CHUNK_BYTES // LINE_BYTES
    bases = []
    nxt = 0
    for s in workload.structures:
        bases.append(nxt)
        nxt += -(-s.lines // chunk_lines) * chunk_lines
    return np.asarray(bases, dtype=np.int64)


def generate(workload: Workload, seed: int) -> Trace:
    """The trace of `workload` for `seed`: same inputs, same trace (byte for byte)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7472616365]))
    specs = workload.structures
    n_struct = len(specs)
    total = workload.warmup_accesses + workload.trace_accesses
    visit_len = np.asarray([_visit_lines(s) for s in specs], dtype=np.int64)
    apki = np.asarray([s.apki for s in specs], dtype=np.float64)
    weight = apki / visit_len
    prob = weight / weight.sum()
    mean_len = float((prob * visit_len).sum())

    # Enough visits to cover the trace, then cut at the first visit that reaches the total.
    n_vis = int(total / mean_len * 1.05) + 64
    while True:
        vs = rng.choice(n_struct, size=n_vis, p=prob).astype(np.int64)
        lens = visit_len[vs]
        ends = np.cumsum(lens)
        if ends[-1] >= total:
            break
        n_vis *= 2
    n_vis = int(np.searchsorted(ends, total) + 1)
    vs, lens, ends = vs[:n_vis], lens[:n_vis], ends[:n_vis]
    n = int(ends[-1])
    starts = ends - lens

    offsets = np.empty(n, dtype=np.int64)
    sid = np.empty(n, dtype=np.int16)
    flags = np.zeros(n, dtype=np.uint8)
    gap = np.empty(n, dtype=np.int32)
    within_gap = np.empty(n_struct, dtype=np.float64)
    for s, spec in enumerate(specs):
        mine = np.flatnonzero(vs == s)
        if mine.size == 0:
            continue
        length = int(visit_len[s])
        pos = (starts[mine][:, None] + np.arange(length, dtype=np.int64)[None, :]).ravel()
        p = spec.pattern
        if isinstance(p, Stream):
            offs = _stream_offsets(rng, spec, mine.size)
        elif isinstance(p, TraceFile):
            offs = _replay_offsets(rng, spec, mine.size, workload.source_dir)
        else:
            offs = _object_offsets(rng, spec, mine.size)
        offsets[pos] = offs
        sid[pos] = s
        dep = rng.random(mine.size) < spec.dependent_fraction
        kinds = np.zeros((mine.size, length), dtype=np.uint8)
        kinds[dep, 0] = DEP_CHAIN
        kinds[dep, 1:] = DEP_SIBLING
        writes = rng.random(pos.size) < spec.write_fraction
        flags[pos] = (kinds.ravel() << DEP_SHIFT) | np.where(writes, FLAG_WRITE, 0).astype(np.uint8)
        within_gap[s] = spec.instructions_between_lines
        if length > 1:
            inner = pos.reshape(mine.size, length)[:, 1:].ravel()
            gap[inner] = rng.geometric(1.0 / spec.instructions_between_lines, size=inner.size)

    # Gaps between visits absorb the rest of the instructions, so that the trace retires
    # 1 / (accesses per instruction) instructions per access on average.
    instructions = n / workload.accesses_per_instruction
    inner_total = float(((lens - 1) * within_gap[vs]).sum())
    mean_between = max(1.0, (instructions - inner_total) / n_vis)
    gap[starts] = rng.geometric(1.0 / mean_between, size=n_vis)

    base = structure_bases(workload)
    lines = base[sid] + offsets
    size_lines = np.asarray([s.lines for s in specs], dtype=np.int64)
    phase = rng.random(n_struct)
    return Trace(
        gap=gap,
        sid=sid,
        lines=lines,
        flags=flags,
        base=base,
        size_lines=size_lines,
        phase=phase,
        warmup=min(workload.warmup_accesses, n - 1),
    )
