"""Request -> prompt ids. Completions take the text as is (no chat template, as OpenAI's completions);
chat goes through the target's chat template. A target without one (the embedded tiny pair) continues
the messages' contents joined by newlines; `specli serve` says so when it starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specli.errors import UsageError
from specli.serve.errors import APIError, one_line

if TYPE_CHECKING:
    from specli.pair import Pair


def has_chat_template(pair: Pair) -> bool:
    return bool(getattr(pair.tokenizer, "chat_template", None))


def completion_ids(pair: Pair, prompt: str | list[int], completion: int) -> list[int]:
    """The ids of a completion prompt (text, or token ids as given); APIError when it cannot run.
    completion: the tokens the request asks to generate (for the context-length error's words)."""
    if isinstance(prompt, list):
        return _checked(pair, list(prompt), "prompt", completion)
    return _checked(pair, _encode(pair, prompt, "prompt"), "prompt", completion)


def chat_ids(pair: Pair, messages: list[dict[str, str]], completion: int) -> list[int]:
    """The ids of a chat: the target's template with the assistant's turn opened."""
    if not has_chat_template(pair):
        text = "\n".join(m["content"] for m in messages)
        return _checked(pair, _encode(pair, text, "messages"), "messages", completion)
    try:
        text = pair.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # the template refused the conversation (e.g. roles must alternate)
        raise APIError(
            400, f"the chat template refused these messages: {one_line(e)}", param="messages"
        ) from None
    ids = list(pair.tokenizer(text, add_special_tokens=False)["input_ids"])
    return _checked(pair, ids, "messages", completion)


def _encode(pair: Pair, text: str, param: str) -> list[int]:
    try:
        return pair.encode(text, chat=False)
    except UsageError as e:
        raise APIError(400, e.message, param=param) from None


def context_error(limit: int, prompt: int, completion: int, param: str) -> APIError:
    """OpenAI's words and code for a prompt that leaves no room to generate (litellm and others map
    them to their context-window error, so their fallbacks run)."""
    return APIError(
        400,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the {param}, {completion} in the completion). "
        f"Please reduce the length of the {param}.",
        param=param,
        code="context_length_exceeded",
    )


def _checked(pair: Pair, ids: list[int], param: str, completion: int) -> list[int]:
    """ids that leave room to generate inside the context, all inside the vocabulary."""
    limit = pair.max_positions
    if limit is not None and len(ids) >= limit:
        raise context_error(limit, len(ids), completion, param)
    try:
        return pair.prompt_ids(prompt_ids=ids)
    except UsageError as e:
        raise APIError(400, e.message, param=param) from None
