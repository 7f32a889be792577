"""Incremental detokenization: each new token's text as soon as it forms whole UTF-8 characters.

As vLLM's ``FastIncrementalDetokenizer`` does, a fast tokenizer streams through ``tokenizers``'
``DecodeStream``, primed with the end of the prompt so that the first output token gets the spacing it has
after the prompt (SentencePiece and byte-level BPE both depend on the previous token). A slow tokenizer
re-decodes the output (quadratic, but correct).
"""

from __future__ import annotations

from typing import Sequence

from tokenizers.decoders import DecodeStream
from transformers import PreTrainedTokenizerBase

_PROMPT_CONTEXT = 6  # prompt tokens that prime the stream (vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET + 1)


class IncrementalDetokenizer:
    """The text of one output sequence, grown token by token."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None, prompt_token_ids: Sequence[int],
                 skip_special_tokens: bool = True, token_texts: dict[int, str] | None = None) -> None:
        """``token_texts``: each token's own text as :meth:`decode_token` found it, shared by the detokenizers
        of one tokenizer (logprobs name up to 21 tokens a step, each a ``decode`` call of ~20 µs)."""
        self.tokenizer = tokenizer
        self.token_texts = {} if token_texts is None else token_texts
        self.skip_special_tokens = skip_special_tokens
        self.text = ""
        self.num_tokens = 0  # tokens stepped through
        self._ids: list[int] = []
        self._stream = None
        if tokenizer is not None and tokenizer.is_fast:
            self._stream = DecodeStream(ids=list(prompt_token_ids[-_PROMPT_CONTEXT:]),
                                        skip_special_tokens=skip_special_tokens)
            self._backend = tokenizer._tokenizer  # (looked up once: step runs for every token)

    def step(self, token_id: int) -> int:
        """Add a token; returns how many characters it added to ``text``."""
        self.num_tokens += 1
        if self._stream is not None:
            piece = self._stream.step(self._backend, token_id) or ""
        elif self.tokenizer is None:
            return 0
        else:
            self._ids.append(token_id)
            whole = self.tokenizer.decode(self._ids, skip_special_tokens=self.skip_special_tokens)
            piece = whole[len(self.text):] if whole.startswith(self.text) and not whole.endswith("\ufffd") else ""
        self.text += piece
        return len(piece)

    def decode_token(self, token_id: int) -> str | None:
        """One token's own text (for logprobs)."""
        if self.tokenizer is None:
            return None
        text = self.token_texts.get(token_id)
        if text is None:
            text = self.token_texts[token_id] = self.tokenizer.decode([token_id])
        return text
