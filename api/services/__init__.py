"""The service's use cases, one module per domain: profiles (upload, fit), models (the prepared
model cache), recommendations (decide), verification runs, price profiles. Each takes an open
session (the caller's one transaction) and raises domain errors (api.errors); SQL stays in
api.repositories, the TMC math in model/, the cluster's nodes and reservations in ledger/.
Nothing here imports a web framework or the task queue."""
