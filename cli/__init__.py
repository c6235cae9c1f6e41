"""tmc command line."""
