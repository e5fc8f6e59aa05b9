"""Request -> prompt ids. Completions take the text as is (no chat template, as OpenAI's completions);
chat goes through the target's chat template. A target without one (the embedded tiny pair) continues
the messages' contents joined by newlines; `specli serve` says so when it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specli.errors import UsageError
from specli.serve.errors import APIError, one_line

if TYPE_CHECKING:
    from specli.api import Pair


def has_chat_template(pair: Pair) -> bool:
    return bool(getattr(pair.tokenizer, "chat_template", None))


def completion_ids(pair: Pair, prompt: str | list[int]) -> list[int]:
    """The ids of a completion prompt (text, or token ids as given); APIError when it cannot run."""
    if isinstance(prompt, list):
        return _checked(pair, list(prompt), "prompt")
    return _checked(pair, _encode(pair, prompt, "prompt"), "prompt")


def chat_ids(pair: Pair, messages: list[dict[str, str]]) -> list[int]:
    """The ids of a chat: the target's template with the assistant's turn opened."""
    if not has_chat_template(pair):
        return _checked(
            pair, _encode(pair, "\n".join(m["content"] for m in messages), "messages"), "messages"
        )
    try:
        text = pair.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # the template refused the conversation (e.g. roles must alternate)
        raise APIError(
            400, f"the chat template refused these messages: {one_line(e)}", param="messages"
        ) from None
    return _checked(pair, list(pair.tokenizer(text, add_special_tokens=False)["input_ids"]), "messages")


def _encode(pair: Pair, text: str, param: str) -> list[int]:
    try:
        return pair.encode(text, chat=False)
    except UsageError as e:
        raise APIError(400, e.message, param=param) from None


def _checked(pair: Pair, ids: list[int], param: str) -> list[int]:
    """ids that leave room to generate inside the context, all inside the vocabulary."""
    limit = pair.max_positions
    if limit is not None and len(ids) >= limit:
        raise APIError(
            400,
            f"the prompt is {len(ids)} tokens but the model's context is {limit} tokens: shorten it so "
            "there is room to generate.",
            param=param,
            code="context_length_exceeded",
        )
    try:
        return pair.prompt_ids(prompt_ids=ids)
    except UsageError as e:
        raise APIError(400, e.message, param=param) from None
