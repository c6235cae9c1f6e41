"""HTTP endpoints, one module per area; each is a thin shell over api.services."""
