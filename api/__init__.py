"""tmc's service: the REST API, its persistence (PostgreSQL, or SQLite embedded) and its tasks."""
