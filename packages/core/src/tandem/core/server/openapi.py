"""The OpenAPI description: request bodies, and every status and body the routes send.

The routes read their bodies themselves (off the event loop when large, see
:mod:`~tandem.core.server.body`), so FastAPI does not see the request models; they are
declared here (:func:`request_body`) and their schemas added to the components
(:func:`install`). ``model`` is documented as one of the served names.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from tandem.core.server import served_bounds
from tandem.core.server.json_text import MAX_DEPTH
from tandem.core.server.schemas import ErrorResponse

REF = "#/components/schemas/{model}"

ERRORS: dict[int, str] = {
    400: "A malformed body or a refused field (`param` names it). A body the schema "
    "calls valid is refused only for what no schema can say: a prompt and `max_tokens` "
    "that do not fit the context window (`code` `context_length_exceeded`); fields that "
    "depend on each other (`min_tokens` <= `max_tokens`, one output constraint at a "
    "time, a `tool_choice` naming one of `tools`); a JSON schema, regex or grammar that "
    f"does not compile; a body nested more than {MAX_DEPTH} arrays and objects deep.",
    401: "No valid API key (the server was started with --api-key).",
    404: "The model asked for is not served.",
    408: "The body did not arrive in time.",
    413: "The body is larger than the server takes (--max-body-bytes).",
    415: "The body was not sent as application/json.",
    429: "Too many sequences wait for the engine; `Retry-After` says when to retry.",
    500: "The request failed inside the engine (the others go on).",
    503: "The engine is not running, or the server is stopping.",
}
GENERATION_ERRORS = (400, 401, 404, 408, 413, 415, 429, 500, 503)
BODY_ERRORS = (400, 401, 404, 408, 413, 415, 503)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {"model": ErrorResponse, "description": ERRORS[code]}
        if code == 429:
            out[code]["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before retrying.",
                    "schema": {"type": "integer"},
                }
            }
    return out


def streamed(*codes: int) -> dict[int | str, dict[str, Any]]:
    """A route that answers JSON, or server-sent events under ``"stream": true``."""
    event_stream = {
        "description": "`data: {chunk}` events, then `data: [DONE]`.",
        # OpenAPI 3.1 without itemSchema: the schema describes one event
        "schema": {
            "type": "object",
            "properties": {
                "data": {"type": "string", "description": "a JSON chunk, or [DONE]"},
                "event": {"type": "string"},
            },
            "required": ["data"],
        },
    }
    return {200: {"content": {"text/event-stream": event_stream}}, **errors(*codes)}


def request_body(*models: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring a JSON body of one of ``models``."""
    refs = [{"$ref": REF.format(model=m.__name__)} for m in models]
    schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def install(
    app: FastAPI,
    models: list[type[BaseModel]],
    names: tuple[str, ...],
    vocab_size: int,
    max_prompts: int,
) -> None:
    """Add the request models to ``app``'s description, ``model`` as one of ``names``,
    token ids in ``[0, vocab_size)``, at most ``max_prompts`` prompts a request."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            body = model.model_json_schema(ref_template=REF)
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        for body in components.values():
            field = body.get("properties", {}).get("model")
            if field is not None and "anyOf" in field:
                field["anyOf"] = [{"type": "string", "enum": list(names)}, {"type": "null"}]
        served_bounds.bind(components, vocab_size, max_prompts)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
