"""tmc node profiler agent: profiles workloads and uploads their bundles. Depends on model types only."""
