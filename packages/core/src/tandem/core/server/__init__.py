"""``tandem serve``: an OpenAI-compatible HTTP API over ``AsyncLLM`` (FastAPI + uvicorn).

``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions`` (the
tokenizer's own chat template), streamed as server-sent events with ``"stream": true``;
``GET /health`` and ``GET /metrics`` (Prometheus text). A bad body is a 400 with an
OpenAI-style error naming the field; a client that goes away aborts its requests.
"""

from __future__ import annotations

from tandem.core.server.run import running_server

__all__ = ["running_server"]
