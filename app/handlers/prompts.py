"""The prompt forms of the completion endpoints: a string, token ids, a mix, or several prompts."""

from __future__ import annotations

from typing import Any

from app.engine import Vocabulary
from app.protocol.errors import InvalidRequestError


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_single_prompt(prompt: Any) -> bool:
    """llama-server's rule: a string, a prompt object (``prompt_string``, ``multimodal_data``), or an
    array of only token ids and strings that holds at least one token id, is one prompt; any other
    array is a list of prompts."""
    if isinstance(prompt, str) or (isinstance(prompt, dict) and "prompt_string" in prompt):
        return True
    if isinstance(prompt, list) and prompt and all(_is_token(p) or isinstance(p, str) for p in prompt):
        return any(_is_token(p) for p in prompt)
    return False


def split_prompts(prompt: Any, field: str = "prompt") -> list[Any]:
    if is_single_prompt(prompt):
        return [prompt]
    if isinstance(prompt, list):
        if not prompt:
            raise InvalidRequestError(f"Field '{field}': the list of prompts is empty")
        for item in prompt:
            if not is_single_prompt(item):
                raise InvalidRequestError(
                    f"Field '{field}': each prompt must be a string, an array of token ids and strings, or a "
                    "prompt object (prompt_string, multimodal_data)"
                )
        return list(prompt)
    raise InvalidRequestError(f"Field '{field}': must be a string, an array of token ids, or a list of prompts")


def tokenize_prompt(vocab: Vocabulary, prompt: Any, add_special: bool, parse_special: bool = True) -> list[int]:
    """Token ids of one prompt. Special tokens (BOS) are added only before a leading string."""
    if isinstance(prompt, dict):
        raise InvalidRequestError("prompt objects (prompt_string, multimodal_data) are taken by /completion and "
                                  "/v1/completions only")
    if isinstance(prompt, str):
        return vocab.tokenize(prompt, add_special, parse_special)
    tokens: list[int] = []
    for position, part in enumerate(prompt):
        if isinstance(part, str):
            tokens.extend(vocab.tokenize(part, add_special and position == 0, parse_special))
        else:
            tokens.append(part)
    return tokens
