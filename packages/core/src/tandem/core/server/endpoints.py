"""What each route does with its parsed body; :mod:`~tandem.core.server.app` lists them."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse

from tandem.core.entrypoints.async_llm import EngineStopped
from tandem.core.server.errors import ApiError, error_response
from tandem.core.server.protocol import ChatCompletionRequest, CompletionRequest
from tandem.core.server.responses import ChatShape, CompletionShape
from tandem.core.server.service import Service
from tandem.core.server.tokenize import DetokenizeRequest, detokenize, tokenize
from tandem.core.server.tool_prompt import render


def _params(svc: Service, body: Any, max_tokens: int | None, logprobs: int | None) -> Any:
    try:
        return body.sampling(svc.llm.default_sampling_params(), max_tokens, logprobs)
    except EngineStopped as exc:
        raise ApiError(503, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise ApiError.refused(exc) from None


async def completions(svc: Service, request: Request, body: CompletionRequest) -> Any:
    svc.check_model(body.model)
    try:
        prompts = body.prompts()
    except ValueError as exc:
        raise ApiError.refused(exc, "prompt") from None
    svc.check_size(len(prompts), body.n)
    params = _params(svc, body, body.max_tokens, body.logprobs)
    shape = CompletionShape(
        svc.config.name,
        svc.llm.get_tokenizer(),
        logprobs=body.logprobs,
        echo=body.echo,
        zero=body.max_tokens == 0,
        prompt_logprobs=body.prompt_logprobs,
        include_usage=body.include_usage,
    )
    wheres = shape.where(len(prompts))
    for prompt, where in zip(prompts, wheres):
        if isinstance(prompt, str):
            try:
                svc.bound.check(prompt, where)
            except ValueError as exc:
                raise ApiError.refused(exc) from None
    pairs = list(zip(prompts, wheres))
    return await svc.run(request, lambda: pairs, len(prompts), params, body.stream, shape)


async def chat(svc: Service, request: Request, body: ChatCompletionRequest) -> Any:
    svc.check_model(body.model)
    svc.check_size(1, body.n)
    try:
        plan = body.make_plan(svc.config.tool_call_parser)
    except ValueError as exc:
        raise ApiError.refused(exc, "tools") from None
    params = _params(svc, body, body.limit, body.top_k_logprobs)
    tokenizer = svc.llm.get_tokenizer()
    turns, tools = render([m.turn() for m in body.messages], plan, tokenizer.chat_template)
    try:
        svc.bound.check("".join(t["content"] for t in turns), "messages")
    except ValueError as exc:
        raise ApiError.refused(exc) from None
    shape = ChatShape(
        svc.config.name,
        tokenizer,
        logprobs=body.top_k_logprobs,
        prompt_logprobs=body.prompt_logprobs,
        include_usage=body.include_usage,
        tools=plan,
    )

    def inputs() -> list[tuple[Any, str]]:
        return [(tokenizer.apply_chat_template(turns, tools=tools), "messages")]

    return await svc.run(request, inputs, 1, params, body.stream, shape)


async def tokenize_route(svc: Service, body: Any) -> Any:
    svc.check_model(body.model)
    tokenizer = svc.llm.get_tokenizer()
    try:
        return JSONResponse(await svc.workers.run(tokenize, tokenizer, body, svc.llm.max_model_len))
    except (TypeError, ValueError) as exc:
        raise ApiError.refused(exc, "prompt") from None


async def detokenize_route(svc: Service, body: DetokenizeRequest) -> Any:
    svc.check_model(body.model)
    try:
        return JSONResponse(await svc.workers.run(detokenize, svc.llm.get_tokenizer(), body))
    except (TypeError, ValueError) as exc:
        raise ApiError.refused(exc, "tokens") from None


def models(svc: Service) -> dict[str, Any]:
    card = {
        "id": svc.config.name,  # the others are accepted as aliases, not announced
        "object": "model",
        "created": svc.created,
        "owned_by": "tandem",
        "max_model_len": svc.llm.max_model_len,
    }
    return {"object": "list", "data": [card]}


def health(svc: Service) -> Any:
    if not svc.llm.is_alive:
        failure = svc.llm.failure
        why = f": {type(failure).__name__}" if failure is not None else ""
        return error_response(503, f"the engine is not running{why}")
    return {"status": "ok"}


async def metrics(svc: Service) -> Any:
    try:
        stats = await svc.llm.stats()
    except EngineStopped:  # the counters still tell what happened before
        stats = None
    text = svc.metrics.render(stats, svc.admission)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
