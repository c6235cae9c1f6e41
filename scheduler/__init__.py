"""The placement half: the Kubernetes scheduler extender (filter, prioritize, bind), its in-memory
cluster cache, and the feeder that keeps the cache and the ledger in step with the API server."""
