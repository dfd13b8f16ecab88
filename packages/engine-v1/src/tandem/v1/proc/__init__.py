"""Processes of v1: child entry points (engine core, detokenizer), their life cycle, the
IPC endpoints and the start-up payload. It may import every other layer; none imports it
but the front end, which starts the children."""
