"""A pytest plugin that runs each suite on every engine in fresh, isolated processes."""
