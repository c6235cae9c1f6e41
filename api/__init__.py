"""REST API, persistence and tasks (the service issue builds this room)."""
