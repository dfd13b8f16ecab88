"""``tandem serve``: an OpenAI-compatible HTTP API over ``AsyncLLM`` (FastAPI + uvicorn).

``GET /v1/models``, ``POST /v1/completions`` (``echo``, ``logprobs``, vLLM's
``prompt_logprobs``), ``POST /v1/chat/completions`` (the tokenizer's own chat template;
tool calls), streamed as server-sent events with ``"stream": true``; ``POST /tokenize``
and ``/detokenize`` (vLLM's shapes); ``GET /health`` and ``GET /metrics`` (Prometheus
text). Both generation routes take ``logit_bias`` and output constraints
(``response_format``, vLLM's ``structured_outputs``). Every error is an OpenAI-style
error naming the field; a client that goes away aborts its requests. Bodies are JSON
(``application/json``, else a 415) read strictly, as ``/openapi.json`` describes them;
browsers of other origins are let in only under ``allowed_origins`` (CORS). ``ServerConfig``
holds the API keys, limits and manners.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerConfig", "running_server"]


def __getattr__(name: str) -> Any:  # lazy: the command line reads the config's defaults
    if name == "ServerConfig":
        from tandem.core.server.config import ServerConfig

        return ServerConfig
    if name == "running_server":
        from tandem.core.server.run import running_server

        return running_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
