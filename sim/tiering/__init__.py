"""Dynamic tiering: a page manager migrating pages between tiers while a workload runs.

draw_stream(workload, seed)                       the accesses of one run
run(stream, host, fast_bytes, knobs, period)      its time under the page manager
tiering_profile(stream, host, ...)                what an agent would record
"""

from sim.tiering.manager import Knobs, TieringRun, run
from sim.tiering.profile import tiering_profile
from sim.tiering.streams import STUDY_WORKLOADS, Stream, TieringWorkload, draw_stream

__all__ = [
    "STUDY_WORKLOADS",
    "Knobs",
    "Stream",
    "TieringRun",
    "TieringWorkload",
    "draw_stream",
    "run",
    "tiering_profile",
]
