"""The calibration protocol (bench/heldout.py) on one workload and host: every figure it reports
is computed from the simulator's ground truth."""

from __future__ import annotations

import numpy as np

from bench.heldout import markdown, study, summarize


def test_one_workload_study_reports_every_figure() -> None:
    cases = study("ptrindex", "cxl_local", 1)
    assert len(cases) == 1
    c = cases[0]
    assert len(c.errors) == len(c.errors_paper) == len(c.z_scores) == 77
    assert c.monotone_violations == 0
    objectives = {d.objective for d in c.alone}
    assert objectives <= {"cheapest", "slo:5%", "slo:10%"} and "cheapest" in objectives
    for d in c.alone + c.verified:
        assert d.true_cost >= d.es_cost * (1.0 - 1e-9) or d.objective == "cheapest"
        assert "at most" in d.promise
    assert all(d.runs == 0 for d in c.alone)
    summary = summarize(cases)["cxl_local"]
    assert 0.0 <= summary["coverage"] <= 1.0
    assert np.isfinite(summary["error_mean"]) and summary["error_worst"] >= summary["error_mean"]
    assert "| cxl_local |" in markdown(summarize(cases))
