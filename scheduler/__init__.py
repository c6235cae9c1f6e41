"""Kubernetes scheduler extender and tiered-resource ledger (the placement issue builds this room)."""
