"""The compiled inner loops: the LLC stack pass and the out-of-order timing pass.

Both run at native speed under numba. Python callers go through the typed wrappers in
`sim.engine`; nothing here knows about workloads, hosts or bundles, only arrays.

Access flags (one byte per access):
    bit 0      the access is a store
    bits 1-2   dependence: 0 independent, 1 waits for the most recent load before it (pointer
               chasing), 2 waits for the same producer as the access before it (the other lines of
               an object reached through one pointer)
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

FLAG_WRITE = 1
DEP_SHIFT = 1
DEP_NONE = 0
DEP_CHAIN = 1
DEP_SIBLING = 2

# Columns of the per-job counter rows written by `time_jobs`.
C_INSTRUCTIONS = 0
C_CYCLES = 1
C_STALL = 2
C_STALL_L3 = 3
C_ACCESSES = 4
C_LOAD_MISSES = 5
C_STORE_MISSES = 6
C_SLOW_MISSES = 7
C_WB_FAST = 8
C_WB_SLOW = 9
C_LAT_FAST = 10
C_N_FAST = 11
C_LAT_SLOW = 12
C_N_SLOW = 13
C_RHO_FAST = 14
C_RHO_SLOW = 15
N_COUNTERS = 16
# The timing pass indexes by tier (0 fast, 1 slow): these pairs must stay adjacent as below.
assert C_WB_SLOW == C_WB_FAST + 1 and C_RHO_SLOW == C_RHO_FAST + 1
assert C_LAT_SLOW == C_LAT_FAST + 2 and C_N_SLOW == C_N_FAST + 2

# Columns of the per-structure counters.
S_MISSES = 0
S_LOAD_MISSES = 1
S_SLOW_MISSES = 2
S_STALL = 3
S_STALL_L3 = 4  # the part of S_STALL in which the access holding retirement missed the LLC
N_STRUCT_COUNTERS = 5

# Columns of the timing parameter vector (cycles, lines and bytes already converted).
P_CPI_CORE = 0
P_ROB = 1
P_MSHRS = 2
P_HIT_CYCLES = 3
P_VCPUS = 4
P_WINDOW = 5
# then per tier t in (0 fast, 1 slow), at 6 + 5 * t:
P_TIER = 6
T_LATENCY = 0
T_KAPPA = 1
T_READ_COST = 2
T_WRITE_COST = 3
T_BACKGROUND = 4
N_PARAMS = P_TIER + 2 * 5

# Utilisation is capped below 1 so that the loaded latency stays finite; the closed loop (more
# latency, fewer requests in flight) keeps the real operating point below the cap.
RHO_CAP = 0.995
# A tier's recent traffic is kept in BW_BINS time bins spanning the utilisation window.
BW_BINS = 16


@njit(cache=True, inline="always")
def _set_of(line: int, mask: int) -> int:
    # A multiplicative hash: real LLCs hash addresses over slices and sets, and a plain modulo
    # would let power-of-two strides of a structure collide in a few sets.
    h = np.uint64(line) * np.uint64(0x9E3779B97F4A7C15)
    return int(h >> np.uint64(40)) & mask


@njit(cache=True)
def lru_stack_pass(
    lines: np.ndarray,
    flags: np.ndarray,
    n_sets: int,
    depth_max: int,
    wb_ways: np.ndarray,
    depth_out: np.ndarray,
    wb_out: np.ndarray,
) -> None:
    """One pass of per-set LRU stacks `depth_max` deep.

    depth_out[k] is the LRU stack position (0 = most recent) at which access k found its line in
    its set, or depth_max if deeper or absent. Under way partitioning a w-way partition holds
    exactly positions 0..w-1 of every set, so access k hits with w ways iff depth_out[k] < w: one
    pass gives every way count (the stack property the miss curve rests on).

    Dirty lines are tracked per way count: bit w of an entry's mask says "dirty in the w-way
    cache". A line moving from position w-1 to w leaves the w-way cache; if dirty there, that is a
    write-back. wb_out[i, k] is the line written back when access k fills the wb_ways[i]-way cache,
    or -1.
    """
    tags = np.full((n_sets, depth_max), -1, dtype=np.int64)
    dirty = np.zeros((n_sets, depth_max), dtype=np.uint64)
    n_wb = wb_ways.shape[0]
    # which wb_ways index (if any) a stack position boundary corresponds to
    wb_index = np.full(depth_max + 1, -1, dtype=np.int64)
    for i in range(n_wb):
        wb_index[wb_ways[i]] = i
    all_bits = np.uint64(0)
    for w in range(1, depth_max + 1):
        all_bits |= np.uint64(1) << np.uint64(w)
    mask = n_sets - 1
    for k in range(lines.shape[0]):
        for i in range(n_wb):
            wb_out[i, k] = -1
        line = int(lines[k])
        s = _set_of(line, mask)
        d = depth_max
        for p in range(depth_max):
            if tags[s, p] == line:
                d = p
                break
        depth_out[k] = d
        # Save the accessed line's dirty bits (valid only for the caches that still hold it).
        keep = np.uint64(0)
        if d < depth_max:
            keep = dirty[s, d]
        # Shift positions 0..top-1 one down; the entry at depth_max-1 falls out when d is a miss.
        top = d if d < depth_max else depth_max - 1
        if d >= depth_max:
            # The bottom entry leaves the depth_max-way cache.
            old = tags[s, depth_max - 1]
            if old >= 0:
                bit = np.uint64(1) << np.uint64(depth_max)
                wi = wb_index[depth_max]
                if wi >= 0 and (dirty[s, depth_max - 1] & bit) != 0:
                    wb_out[wi, k] = old
        for p in range(top - 1, -1, -1):
            old = tags[s, p]
            m = dirty[s, p]
            if old >= 0:
                # Moving from position p to p + 1 leaves the (p + 1)-way cache.
                bit = np.uint64(1) << np.uint64(p + 1)
                if (m & bit) != 0:
                    m &= ~bit
                    wi = wb_index[p + 1]
                    if wi >= 0:
                        wb_out[wi, k] = old
            tags[s, p + 1] = old
            dirty[s, p + 1] = m
        tags[s, 0] = line
        if (flags[k] & FLAG_WRITE) != 0:
            dirty[s, 0] = all_bits
        else:
            dirty[s, 0] = keep


@njit(cache=True, inline="always")
def _is_slow(
    off: int,
    s: int,
    slow_frac: np.ndarray,
    fast_lines: np.ndarray,
    phase: np.ndarray,
    tail: bool,
) -> bool:
    f = slow_frac[s]
    if f <= 0.0:
        return False
    if f >= 1.0:
        return True
    if tail:
        return bool(off >= fast_lines[s])
    # Weighted page interleave: 4 KiB page p of the structure is slow when the Weyl sequence
    # frac(p * golden + phase) falls below the structure's slow fraction, which spreads exactly
    # that fraction of pages evenly over the structure.
    x = (off >> 6) * 0.6180339887498949 + phase[s]
    return bool((x - np.floor(x)) < f)


@njit(cache=True, inline="always")
def _struct_of(line: int, base: np.ndarray) -> int:
    lo = 0
    hi = base.shape[0] - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if base[mid] <= line:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, error_model="numpy")
def _time_one(
    gap: np.ndarray,
    sid: np.ndarray,
    lines: np.ndarray,
    flags: np.ndarray,
    depth: np.ndarray,
    wb: np.ndarray,
    ways: int,
    slow_frac: np.ndarray,
    fast_lines: np.ndarray,
    phase: np.ndarray,
    tail: bool,
    base: np.ndarray,
    params: np.ndarray,
    start: int,
    warmup: int,
    out: np.ndarray,
    out_s: np.ndarray,
) -> None:
    """Time one configuration: `ways` of LLC, `slow_frac` of each structure in the slow tier.

    One core dispatches an instruction every `cpi_core` cycles unless the instruction ROB places
    older has not retired; retirement is in order. An access issues when dispatched (or when its
    producer load has its data, if dependent) and a fill buffer is free; a hit takes the LLC's
    latency, a miss its tier's latency grown by that tier's recent utilisation. Overlap between
    misses is therefore whatever the window and the fill buffers allow: nothing sets MLP.
    Counters cover accesses from `warmup` on; `out` and `out_s` receive them.
    """
    c = params[P_CPI_CORE]
    rob = int(params[P_ROB])
    n_mshr = int(params[P_MSHRS])
    hit_cycles = params[P_HIT_CYCLES]
    vcpus = params[P_VCPUS]
    window = params[P_WINDOW]
    lat = np.empty(2)
    kappa = np.empty(2)
    rcost = np.empty(2)
    wcost = np.empty(2)
    bg = np.empty(2)
    for tier in range(2):
        o = P_TIER + 5 * tier
        lat[tier] = params[o + T_LATENCY]
        kappa[tier] = params[o + T_KAPPA]
        rcost[tier] = params[o + T_READ_COST]
        wcost[tier] = params[o + T_WRITE_COST]
        bg[tier] = params[o + T_BACKGROUND]

    cap = rob + 2
    rob_instr = np.zeros(cap, dtype=np.int64)
    rob_gate = np.zeros(cap)
    rob_l3 = np.zeros(cap)  # 1.0: a load that missed the LLC
    rob_sid = np.zeros(cap, dtype=np.int64)
    head = 0
    tail_r = 0
    mshr = np.zeros(n_mshr)
    # Each tier's traffic (device busy cycles) over the last BW_BINS time bins of the window.
    bins = np.zeros((2, BW_BINS))
    cur_bin = 0
    busy0 = 0.0
    busy1 = 0.0
    per_bin = BW_BINS / window
    acc = np.zeros(N_COUNTERS)
    acc_s = np.zeros((out_s.shape[0], N_STRUCT_COUNTERS))

    t = 0.0
    instr = 0
    frontier = 0.0
    frontier_l3 = 0.0
    frontier_sid = 0
    last_load_done = 0.0
    producer_done = 0.0
    t_start = 0.0
    instr_start = 0
    for k in range(start, gap.shape[0]):
        if k == warmup:
            # Everything before is warm-up: counters restart from here.
            t_start = t
            instr_start = instr
            acc[:] = 0.0
            acc_s[:, :] = 0.0
        g = gap[k]
        instr += g
        tn = t + g * c
        # In-order retirement: this instruction dispatches only once the one ROB places older has
        # retired, i.e. once every load up to it has its data.
        while head != tail_r and rob_instr[head] + rob <= instr:
            # Written as selects rather than branches: which entry sets the pace, and whether
            # dispatch has to wait for it, is unpredictable and mispredictions dominated here.
            d = rob_gate[head]
            newer = d > frontier
            frontier = d if newer else frontier
            frontier_l3 = rob_l3[head] if newer else frontier_l3
            frontier_sid = rob_sid[head] if newer else frontier_sid
            wait = frontier + (instr - rob_instr[head] - rob) * c - tn
            wait = wait if wait > 0.0 else 0.0
            acc[C_STALL] += wait
            acc[C_STALL_L3] += wait * frontier_l3
            acc_s[frontier_sid, S_STALL] += wait
            acc_s[frontier_sid, S_STALL_L3] += wait * frontier_l3
            tn += wait
            head += 1
            head = 0 if head == cap else head
        t = tn
        b = int(t * per_bin)
        if b != cur_bin:
            if b - cur_bin >= BW_BINS:
                bins[:, :] = 0.0
                busy0 = 0.0
                busy1 = 0.0
            else:
                while cur_bin < b:
                    cur_bin += 1
                    i = cur_bin & (BW_BINS - 1)
                    busy0 -= bins[0, i]
                    busy1 -= bins[1, i]
                    bins[0, i] = 0.0
                    bins[1, i] = 0.0
            cur_bin = b

        f = flags[k]
        is_store = (f & FLAG_WRITE) != 0
        dep = (f >> DEP_SHIFT) & 3
        if dep == DEP_CHAIN:
            producer_done = last_load_done
        ready = t
        if dep != DEP_NONE and producer_done > ready:
            ready = producer_done
        # The miss-status registers bound how many accesses are in flight at once.
        j = 0
        best: float = mshr[0]
        for i in range(1, n_mshr):
            # Select without branches: which register frees first is unpredictable.
            v = mshr[i]
            j = i if v < best else j
            best = v if v < best else best
        begin = ready if ready > mshr[j] else mshr[j]
        s = int(sid[k])
        hit = depth[k] < ways
        l3 = False
        if hit:
            done = begin + hit_cycles
        else:
            line = int(lines[k])
            tier = 1 if _is_slow(line - base[s], s, slow_frac, fast_lines, phase, tail) else 0
            busy = busy1 if tier == 1 else busy0
            rho = vcpus * busy / window + bg[tier]
            rho = min(rho, RHO_CAP)
            latency = lat[tier] * (1.0 + kappa[tier] * rho / (1.0 - rho))
            done = begin + latency
            bins[tier, cur_bin & (BW_BINS - 1)] += rcost[tier]
            if tier == 1:
                busy1 += rcost[1]
            else:
                busy0 += rcost[0]
            l3 = not is_store
            ld = 0.0 if is_store else 1.0
            acc_s[s, S_MISSES] += 1.0
            acc_s[s, S_LOAD_MISSES] += ld
            acc_s[s, S_SLOW_MISSES] += tier
            acc[C_LOAD_MISSES] += ld
            acc[C_STORE_MISSES] += 1.0 - ld
            acc[C_SLOW_MISSES] += tier
            acc[C_LAT_FAST + 2 * tier] += latency
            acc[C_N_FAST + 2 * tier] += 1.0
            acc[C_RHO_FAST + tier] += rho
        mshr[j] = done
        victim = wb[k]
        if victim >= 0:
            vs = _struct_of(victim, base)
            vt = 1 if _is_slow(victim - base[vs], vs, slow_frac, fast_lines, phase, tail) else 0
            bins[vt, cur_bin & (BW_BINS - 1)] += wcost[vt]
            if vt == 1:
                busy1 += wcost[1]
            else:
                busy0 += wcost[0]
            acc[C_WB_FAST + vt] += 1.0
        if is_store:
            # A store retires once it holds a fill buffer; its data merges later (store buffer).
            gate = begin
        else:
            gate = done
            last_load_done = done
        acc[C_ACCESSES] += 1.0
        rob_instr[tail_r] = instr
        rob_gate[tail_r] = gate
        rob_l3[tail_r] = 1.0 if l3 else 0.0
        rob_sid[tail_r] = s
        tail_r += 1
        if tail_r == cap:
            tail_r = 0
    acc[C_INSTRUCTIONS] = instr - instr_start
    acc[C_CYCLES] = t - t_start
    # Written once at the end: rows of neighbouring jobs share cache lines across threads.
    out[:] = acc
    out_s[:, :] = acc_s


@njit(cache=True, parallel=True)
def time_jobs(
    gap: np.ndarray,
    sid: np.ndarray,
    lines: np.ndarray,
    flags: np.ndarray,
    depth: np.ndarray,
    wb: np.ndarray,
    job_wb_row: np.ndarray,
    job_ways: np.ndarray,
    job_slow_frac: np.ndarray,
    job_fast_lines: np.ndarray,
    phase: np.ndarray,
    tail: bool,
    base: np.ndarray,
    params: np.ndarray,
    start: int,
    warmup: int,
    out: np.ndarray,
    out_s: np.ndarray,
) -> None:
    """Time every job (a way count and a per-structure slow fraction) over the same trace."""
    for j in prange(job_ways.shape[0]):
        _time_one(
            gap,
            sid,
            lines,
            flags,
            depth,
            wb[job_wb_row[j]],
            job_ways[j],
            job_slow_frac[j],
            job_fast_lines[j],
            phase,
            tail,
            base,
            params,
            start,
            warmup,
            out[j],
            out_s[j],
        )
