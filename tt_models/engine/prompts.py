"""Request prompts in vLLM 0.25.1's formats (``vllm/inputs/llm.py``): a string, a list of token ids, a
``TextPrompt``, a ``TokensPrompt``, and for encoder-decoder models an ``ExplicitEncoderDecoderPrompt``; parsed into
their text, token ids and multi-modal data, whatever the model (what a model makes of them is
``tt_models.engine.inputs``).

Every problem with a prompt's form raises ``ValueError`` naming it, so the engine can fail that request alone.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from typing_extensions import NotRequired, TypedDict


class TextPrompt(TypedDict):
    """A text prompt (vLLM's name and keys)."""

    prompt: str
    multi_modal_data: NotRequired[Mapping[str, Any] | None]


class TokensPrompt(TypedDict):
    """A tokenized prompt; ``prompt`` is its text, when known, for the output."""

    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    multi_modal_data: NotRequired[Mapping[str, Any] | None]


SingletonPrompt: TypeAlias = str | list[int] | TextPrompt | TokensPrompt


class ExplicitEncoderDecoderPrompt(TypedDict):
    """Both prompts of an encoder-decoder model; a ``None`` decoder prompt means the model's default."""

    encoder_prompt: SingletonPrompt
    decoder_prompt: SingletonPrompt | None


PromptType: TypeAlias = SingletonPrompt | ExplicitEncoderDecoderPrompt


@dataclass(frozen=True)
class ParsedPrompt:
    """A parsed singleton prompt: its text and/or token ids, and its multi-modal data."""

    text: str | None
    token_ids: list[int] | None
    multi_modal_data: Mapping[str, Any] | None

    @property
    def is_empty(self) -> bool:
        return not self.token_ids if self.token_ids is not None else not self.text


_TEXT_KEYS = frozenset({"prompt", "multi_modal_data"})
_TOKENS_KEYS = frozenset({"prompt_token_ids", "prompt", "multi_modal_data"})
_EXPLICIT_KEYS = frozenset({"encoder_prompt", "decoder_prompt"})


def is_explicit(prompt: object) -> bool:
    return isinstance(prompt, Mapping) and ("encoder_prompt" in prompt or "decoder_prompt" in prompt)


def split_encoder_decoder(prompt: PromptType) -> tuple[ParsedPrompt, ParsedPrompt | None]:
    """The encoder prompt and the decoder prompt (None: the model's default) of an encoder-decoder prompt."""
    if not is_explicit(prompt):
        return parse_singleton(prompt, "encoder prompt"), None
    unknown = sorted(set(prompt) - _EXPLICIT_KEYS)
    if unknown:
        raise ValueError(f"Unsupported ExplicitEncoderDecoderPrompt keys {unknown}: it takes {sorted(_EXPLICIT_KEYS)}")
    if "encoder_prompt" not in prompt:
        raise ValueError("An ExplicitEncoderDecoderPrompt needs an encoder_prompt")
    decoder = prompt.get("decoder_prompt")
    return (parse_singleton(prompt["encoder_prompt"], "encoder prompt"),
            None if decoder is None else parse_singleton(decoder, "decoder prompt"))


def parse_singleton(prompt: object, what: str) -> ParsedPrompt:
    if isinstance(prompt, str):
        return ParsedPrompt(prompt, None, None)
    if isinstance(prompt, list):
        return ParsedPrompt(None, _token_id_list(prompt, what), None)
    if not isinstance(prompt, Mapping):
        raise ValueError(f"The {what} must be a string, a list of token ids, a TextPrompt or a TokensPrompt; "
                         f"got {type(prompt).__name__}")
    if is_explicit(prompt):
        raise ValueError(f"The {what} cannot itself be an ExplicitEncoderDecoderPrompt")
    if "prompt_token_ids" in prompt:
        allowed, kind = _TOKENS_KEYS, "TokensPrompt"
    elif "prompt" in prompt:
        allowed, kind = _TEXT_KEYS, "TextPrompt"
    else:
        raise ValueError(f"The {what} has neither 'prompt' nor 'prompt_token_ids' (keys {sorted(prompt)})")
    unknown = sorted(set(prompt) - allowed)
    if unknown:
        raise ValueError(f"Unsupported {kind} keys {unknown} in the {what}: it takes {sorted(allowed)}")
    text = prompt.get("prompt")
    if text is not None and not isinstance(text, str) or kind == "TextPrompt" and text is None:
        raise ValueError(f"The {what}'s 'prompt' must be a string, got {type(text).__name__}")
    multi_modal_data = prompt.get("multi_modal_data")
    if multi_modal_data is not None and not isinstance(multi_modal_data, Mapping):
        raise ValueError(f"multi_modal_data must be a dict of modality to data, got {type(multi_modal_data).__name__}")
    token_ids = _token_id_list(prompt["prompt_token_ids"], what) if kind == "TokensPrompt" else None
    return ParsedPrompt(text, token_ids, multi_modal_data or None)


def _token_id_list(token_ids: object, what: str) -> list[int]:
    if not isinstance(token_ids, Sequence) or isinstance(token_ids, (str, bytes)):
        raise ValueError(f"The {what}'s token ids must be a list of integers, got {type(token_ids).__name__}")
    bad = [t for t in token_ids if isinstance(t, bool) or not isinstance(t, numbers.Integral)]
    if bad:
        raise ValueError(f"The {what}'s token ids must be integers, got {bad[0]!r}")
    return [int(t) for t in token_ids]
