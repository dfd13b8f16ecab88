"""The OpenAI API's request bodies (pydantic) and how they become ``SamplingParams``.

Unknown fields and those this server cannot honour are handled by
:mod:`~tandem.core.server.open_model`; output constraints by
:mod:`~tandem.core.server.formats` and, for tool calls, :mod:`~tandem.core.server.tools`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr

from tandem.core.inputs.sampling_params import REPETITION_PENALTY_RANGE, SamplingParams
from tandem.core.server.field_types import Int, NonEmptyText, PromptList, TokenId
from tandem.core.server.formats import ResponseFormat, StructuredOutputsBody, constraint_of
from tandem.core.server.open_model import _Open
from tandem.core.server.served_bounds import TOKEN_ID_KEYS
from tandem.core.server.tools import ToolCallIn, ToolChoice, ToolDef, ToolPlan, plan_tools
from tandem.core.structured import StructuredOutputsParams
from tandem.core.validate import FLOAT32_TINY, RequestError

MAX_LOGPROBS = 20
LogitBias = Annotated[float, Field(ge=-100.0, le=100.0)]


class _Body(_Open):
    model: str | None = None
    # sampling fields left out take the model's defaults (its generation_config.json)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=FLOAT32_TINY, le=1.0)  # the sampler's float32
    n: Int(1, 16) = 1
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: NonEmptyText | list[NonEmptyText] | None = None
    seed: Int() | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    user: str | None = None
    # beyond OpenAI, as vLLM's server accepts them
    top_k: Int(-1) | None = None
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(
        None, ge=REPETITION_PENALTY_RANGE[0], le=REPETITION_PENALTY_RANGE[1]
    )
    min_tokens: Int(0) = 0
    ignore_eos: bool = False
    stop_token_ids: list[Int(0)] | None = None
    prompt_logprobs: Int(0, MAX_LOGPROBS) | None = None
    # OpenAI's shape: token id (a JSON key, so a string) -> bias in [-100, 100]
    logit_bias: (
        Annotated[
            dict[Annotated[str, Field(pattern=r"^(0|[1-9][0-9]{0,18})$")], LogitBias],
            Field(json_schema_extra=TOKEN_ID_KEYS),
        ]
        | None
    ) = None
    # output constraints: OpenAI's response_format, vLLM's structured_outputs and guided_*
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsBody | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: Annotated[list[NonEmptyText], Field(min_length=1)] | None = None
    guided_grammar: str | None = None

    def constraint(self) -> StructuredOutputsParams | None:
        """What the output must match (None: free)."""
        return constraint_of(self)

    def sampling(
        self, defaults: SamplingParams, max_tokens: int | None, logprobs: int | None
    ) -> SamplingParams:
        """The body's params over the model's ``defaults`` (a field left out keeps its
        default; ``max_tokens`` as the endpoint reads it, 0 made 1: the token is dropped)."""
        given = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
        }
        return defaults.replace(
            **{k: v for k, v in given.items() if v is not None},
            n=self.n,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos,
            max_tokens=1 if max_tokens == 0 else max_tokens,
            min_tokens=0 if max_tokens == 0 else self.min_tokens,
            logprobs=logprobs,
            prompt_logprobs=self.prompt_logprobs_asked,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias=self.logit_bias,
            structured_outputs=self.constraint(),
        )

    @property
    def prompt_logprobs_asked(self) -> int | None:
        """How many top logprobs each prompt position needs (None: none)."""
        return self.prompt_logprobs

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(_Body):
    prompt: (
        NonEmptyText
        | PromptList(NonEmptyText)
        | Annotated[list[TokenId], Field(min_length=1)]
        | PromptList(Annotated[list[TokenId], Field(min_length=1)])
    )
    max_tokens: Int(0) | None = 16
    logprobs: Int(0, MAX_LOGPROBS) | None = None
    echo: bool = False

    @property
    def prompt_logprobs_asked(self) -> int | None:
        wanted = [k for k in (self.prompt_logprobs, self.echo_logprobs) if k is not None]
        return max(wanted) if wanted else None

    @property
    def echo_logprobs(self) -> int | None:
        """The prompt's logprobs that ``echo`` with ``logprobs`` shows."""
        return self.logprobs if self.echo else None

    def prompts(self) -> list[str | list[int]]:
        """The prompts of the body (a batch when ``prompt`` is a list of them)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise RequestError(
                "prompt", "prompt is empty: give a string, a list of token ids or a list of those"
            )
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class ChatMessage(_Open):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None  # None only for an assistant turn that called tools
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool turn: the call it answers

    def turn(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class ChatCompletionRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Int(1) | None = None
    max_completion_tokens: Int(1) | None = None
    logprobs: bool = False
    top_logprobs: Int(0, MAX_LOGPROBS) | None = None
    tools: list[ToolDef] | None = Field(None, min_length=1)
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    _plan: ToolPlan | None = PrivateAttr(None)  # set by make_plan(), before sampling()

    def make_plan(self, parser: str) -> ToolPlan:
        """The request's tool plan (RequestError naming the field when it cannot be met)."""
        plan = plan_tools(self.tools, self.tool_choice, self.parallel_tool_calls, parser)
        if plan.constraint() is not None and constraint_of(self) is not None:
            raise RequestError(
                "tool_choice",
                f"tool_choice {plan.mode!r} constrains the output already; "
                "leave out response_format and structured_outputs",
            )
        self._plan = plan
        return plan

    def constraint(self) -> StructuredOutputsParams | None:
        forced = self._plan.constraint() if self._plan is not None else None
        return forced or constraint_of(self)

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_k_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None
