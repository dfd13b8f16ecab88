"""Models by name: the default model and the named ones."""
