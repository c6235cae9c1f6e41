"""tmc node profiler agent (the agent issue builds this room). Depends on model types only."""
