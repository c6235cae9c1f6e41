"""The pure TMC domain: profile bundles, the fitted CPI model, pricing, and Algorithm 1.

Nothing here knows about HTTP, SQL, task queues or Kubernetes; the edges call in.
"""

from model.bundle import BUNDLE_SCHEMA, ProfileBundle, check_bundle, parse_bundle
from model.errors import InvalidBundle, InvalidRequest, NoFeasibleConfiguration, Problem, TmcError
from model.fit import MODEL_VERSION, FitDiagnostics, FittedModel, Flag, fit
from model.grid import Grid, host_grid, paper_grid
from model.objectives import CHEAPEST, DEFAULT_THRESHOLD, Objective, parse_objective
from model.predict import Predictor, StructurePlacement
from model.priced_grid import machine_of_host, predicted_grid
from model.pricing import DEFAULT_PRICE_PROFILE, PriceProfile, paper_price_profile
from model.recommend import recommend
from model.recommendation import Candidate, GridPoint, Recommendation
from model.resources import (
    Configuration,
    Demand,
    MachineShape,
    Utilization,
    configuration,
    demand,
    packing_penalty,
)
from model.select import algorithm1

__all__ = [
    "BUNDLE_SCHEMA",
    "CHEAPEST",
    "DEFAULT_PRICE_PROFILE",
    "DEFAULT_THRESHOLD",
    "MODEL_VERSION",
    "Candidate",
    "Configuration",
    "Demand",
    "FitDiagnostics",
    "FittedModel",
    "Flag",
    "Grid",
    "GridPoint",
    "InvalidBundle",
    "InvalidRequest",
    "MachineShape",
    "NoFeasibleConfiguration",
    "Objective",
    "Predictor",
    "PriceProfile",
    "Problem",
    "ProfileBundle",
    "Recommendation",
    "StructurePlacement",
    "TmcError",
    "Utilization",
    "algorithm1",
    "check_bundle",
    "configuration",
    "demand",
    "fit",
    "host_grid",
    "machine_of_host",
    "packing_penalty",
    "paper_grid",
    "paper_price_profile",
    "parse_bundle",
    "parse_objective",
    "predicted_grid",
    "recommend",
]
