"""Tiered-memory host and cluster simulator: the ground truth tmc is measured against.

It simulates accesses; it never evaluates the TMC equation (that is what it tests)."""
