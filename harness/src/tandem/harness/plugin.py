"""pytest entry point of the harness."""
