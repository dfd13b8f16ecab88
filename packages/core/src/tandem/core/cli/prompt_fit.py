"""``tandem generate``'s prompts held to the context before the engine loads.

Loading an engine takes seconds (a large model: minutes); reading a model's config and
its tokenizer takes a fraction of that. So the prompts are tokenized with the model's
own tokenizer first (through its chat template when they go that way: the default where
the model has one, ``--chat``/``--no-chat`` to choose) and one that cannot fit
is refused at once, with its token count, the context and the flag that widens it. The
context checked is ``--max-model-len``, else the model's own maximum: an engine that
picks a shorter one to fit its memory still refuses a prompt, with the same message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tandem.core.inputs.context_limit import model_context_limit, prompt_too_long


def _ids(tokenizer: Any, prompt: str, chat: bool) -> list[int]:
    if chat:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], True)
    return tokenizer.encode(prompt)


def check_prompts_fit(
    model: str, prompts: Sequence[str], max_model_len: int | None, chat: bool | None
) -> bool:
    """ValueError, naming ``--max-model-len``, when a prompt cannot fit or the flag asks
    for more than the model allows. ``model``: a resolved directory or ``.gguf`` file.

    ``chat``: True sends the prompts through the chat template, False as they are, None
    through the template when the model has one. Returns which it is."""
    import torch

    from tandem.core.config.model import load_model_config
    from tandem.core.text.tokenizer import load_tokenizer

    config = load_model_config(model, device=torch.device("cpu"))
    limit = model_context_limit(config.hf_config)
    if max_model_len is not None and limit is not None and max_model_len > limit:
        raise ValueError(
            f"--max-model-len {max_model_len} is more than the model allows: at most {limit} "
            "(its max_position_embeddings)"
        )
    context = max_model_len if max_model_len is not None else config.max_model_len
    tokenizer = load_tokenizer(config.tokenizer)
    if chat is None:
        chat = tokenizer.has_chat_template
    for i, prompt in enumerate(prompts):
        count = len(_ids(tokenizer, prompt, chat))
        if count >= context:
            where = "the prompt" if len(prompts) == 1 else f"prompt {i}"
            raise ValueError(prompt_too_long(where, count, context, limit))
    return chat


def shown(prompt: str, most: int = 200) -> str:
    """``prompt`` as the output's heading shows it: whole when short, else its start and
    its length (a 24,000-character prompt is not printed back)."""
    if len(prompt) <= most:
        return repr(prompt)
    return f"{prompt[: most // 2]!r}... ({len(prompt):,} characters)"
