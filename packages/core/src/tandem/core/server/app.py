"""The FastAPI application: its layers and its routes.

Outside in: :class:`~tandem.core.server.front.Front` (request id, access log, last-resort
500), CORS when origins are allowed (a preflight needs no API key; refusals carry the
headers too), :class:`~tandem.core.server.guard.Guard` (API key, body size), then the
routes. A
route reads its body (:func:`~tandem.core.server.body.read_body`) and hands it to
:mod:`~tandem.core.server.endpoints`; what it may answer is declared for the OpenAPI
description (:mod:`~tandem.core.server.openapi`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from tandem.core.entrypoints.async_llm import AsyncLLM
from tandem.core.server import endpoints, errors, openapi
from tandem.core.server.body import read_body
from tandem.core.server.config import ServerConfig, config_for
from tandem.core.server.cors import Cors
from tandem.core.server.front import Front
from tandem.core.server.guard import Guard
from tandem.core.server.protocol import ChatCompletionRequest, CompletionRequest
from tandem.core.server.schemas import (
    ChatCompletionResponse,
    CompletionResponse,
    DetokenizeResponse,
    Health,
    ModelList,
    TokenizeResponse,
)
from tandem.core.server.service import Service
from tandem.core.server.tokenize import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    tokenize_body,
)

REQUEST_MODELS = [
    CompletionRequest,
    ChatCompletionRequest,
    TokenizeCompletionRequest,
    TokenizeChatRequest,
    DetokenizeRequest,
]


def build_app(
    llm: AsyncLLM, config: ServerConfig | str | tuple[str, ...] | None = None, **options: Any
) -> Any:
    """The application serving ``llm``; ``config`` is a ``ServerConfig`` or the served
    model name(s), the first announced (None: the names ``llm`` was opened by, as
    :func:`~tandem.core.catalog.named_models.served_names` gives them); ``options``: the other
    ``ServerConfig`` fields."""
    cfg = config_for(llm.model_names if config is None else config, **options)
    app = FastAPI(
        title="tandem",
        description="An OpenAI-compatible API over Tandem.",
        docs_url=None,
        redoc_url=None,
    )
    svc = Service(llm, cfg)
    app.state.service = svc
    errors.install(app, svc.count_error)
    app.add_middleware(Guard, config=cfg)
    if cfg.allowed_origins:
        app.add_middleware(Cors, config=cfg)
    app.add_middleware(Front, quiet=cfg.quiet)

    async def body_of(request: Request, model: Any) -> Any:
        return await read_body(request, model, svc.workers, cfg.strict_fields)

    @app.get("/health", response_model=Health, responses=openapi.errors(503))
    async def health() -> Any:
        return endpoints.health(svc)

    @app.get("/v1/models", response_model=ModelList, responses=openapi.errors(401))
    async def models() -> Any:
        return endpoints.models(svc)

    @app.get("/metrics", response_class=PlainTextResponse, responses=openapi.errors(401))
    async def metrics() -> Any:
        """Prometheus text: the server's counters and the engine's gauges."""
        return await endpoints.metrics(svc)

    @app.post(
        "/v1/completions",
        response_model=CompletionResponse,
        responses=openapi.streamed(*openapi.GENERATION_ERRORS),
        openapi_extra=openapi.request_body(CompletionRequest),
    )
    async def completions(request: Request) -> Any:
        body = await body_of(request, CompletionRequest)
        return await endpoints.completions(svc, request, body)

    @app.post(
        "/v1/chat/completions",
        response_model=ChatCompletionResponse,
        responses=openapi.streamed(*openapi.GENERATION_ERRORS),
        openapi_extra=openapi.request_body(ChatCompletionRequest),
    )
    async def chat(request: Request) -> Any:
        body = await body_of(request, ChatCompletionRequest)
        return await endpoints.chat(svc, request, body)

    @app.post(
        "/tokenize",
        response_model=TokenizeResponse,
        responses=openapi.errors(*openapi.BODY_ERRORS),
        openapi_extra=openapi.request_body(TokenizeCompletionRequest, TokenizeChatRequest),
    )
    async def tokenize(request: Request) -> Any:
        body = await body_of(request, tokenize_body)
        return await endpoints.tokenize_route(svc, body)

    @app.post(
        "/detokenize",
        response_model=DetokenizeResponse,
        responses=openapi.errors(*openapi.BODY_ERRORS),
        openapi_extra=openapi.request_body(DetokenizeRequest),
    )
    async def detokenize(request: Request) -> Any:
        body = await body_of(request, DetokenizeRequest)
        return await endpoints.detokenize_route(svc, body)

    openapi.install(app, REQUEST_MODELS, cfg.model_names, svc.vocab_size, cfg.max_prompts)
    return app
