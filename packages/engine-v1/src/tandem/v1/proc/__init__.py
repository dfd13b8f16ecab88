"""Processes of v1: child entry points (engine core, detokenizer), their life cycle, the
IPC endpoints, the config payload and the typed messages that cross between them."""
