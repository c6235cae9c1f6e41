"""Benchmarks: each prints its figures (and, where it compares, the ratio to a same-run baseline)."""
