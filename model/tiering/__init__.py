"""Dynamic tiering: how much fast memory, how often to migrate, which page-manager knobs.

The profile schema (`profile`) is what the agent records; the advisor (`advise`) answers the
three questions from it. Pure: no I/O.
"""

from model.tiering.advise import (
    ADVICE_SCHEMA,
    SPACES,
    TieringAdvice,
    TieringRequest,
    advise,
    space_for,
)
from model.tiering.profile import TIERING_SCHEMA, TieringProfile
from model.tiering.tune import HEMEM_SPACE, KnobSpace, Trial

__all__ = [
    "ADVICE_SCHEMA",
    "HEMEM_SPACE",
    "SPACES",
    "TIERING_SCHEMA",
    "KnobSpace",
    "TieringAdvice",
    "TieringProfile",
    "TieringRequest",
    "Trial",
    "advise",
    "space_for",
]
