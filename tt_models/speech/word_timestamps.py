"""Word timestamps: each word of a window's text with its start and end, from the cross-attention of the checkpoint's
alignment heads, as HF's pipeline (``return_timestamps="word"``) computes them.

A window's request asks the engine for the attention probabilities of the alignment heads
(``SamplingParams(extra_args={"alignment_heads": ...})``): when the request finishes, before its cross blocks are
freed, the engine runs one teacher-forced decoder pass over its tokens (prompt and output, but the last) and returns
them ``[heads, tokens, encoder positions]`` (``CompletionOutput.alignment_weights``; on a card, those probabilities
are what moves to the host). A request preempted between its last sampled token and that pass (async decode) has
lost its cross blocks and finishes without them: the speech layer asks for them again with a one-token request over
the same audio and tokens (:func:`realignment_request`). On the host, HF's
``WhisperForConditionalGeneration._extract_token_timestamps`` steps: the weights cut to the audio's frames, the
prompt's rows dropped, each normalized over the tokens, the median filter of ``median_filter_width`` over the
frames, the mean over heads, dynamic time warping, and each token's time where its row first advances (transformers'
own ``_median_filter`` and ``_dynamic_time_warping``). Then the tokenizer's ``_decode_asr`` word handling: a text
token spans from the previous token's time to its own, the text between two timestamp tokens is split into words
with their punctuation merged (transformers' ``_collate_word_timestamps``), and a word spans its first token's start
to its last token's end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.models.whisper.generation_whisper import _dynamic_time_warping, _median_filter
from transformers.models.whisper.tokenization_whisper import LANGUAGES, _collate_word_timestamps

from tt_models.engine.prompts import TokensPrompt
from tt_models.engine.sampling import SamplingParams
from tt_models.speech.timestamps import TIME_PRECISION

HOP_LENGTH = 160  # samples per mel frame; the encoder's positions are every second frame


@dataclass(frozen=True)
class Word:
    """A word as the tokenizer merges it (with its leading space and punctuation), in seconds of the whole audio."""

    word: str
    start: float
    end: float


def alignment_heads(generation_config: Any) -> list[list[int]]:
    """The checkpoint's alignment heads (``[[layer, head], ...]``, the generation config's, as HF's hub configs have
    them). Raises ValueError when it has none."""
    heads = getattr(generation_config, "alignment_heads", None)
    if not heads:
        raise ValueError("word timestamps need the checkpoint's alignment heads, and its generation config has no "
                         "alignment_heads")
    return [[int(layer), int(head)] for layer, head in heads]


def token_times(weights: torch.Tensor, prompt_len: int, samples: int, median_filter_width: int) -> np.ndarray:
    """The time (s, from the window's start) of each output token, from the alignment heads' probabilities over
    the prompt and output tokens but the last (``[heads, prompt_len + outputs - 1, encoder positions]``) of a
    window of ``samples`` samples: HF's ``_extract_token_timestamps`` (its ``num_frames`` the window's mel frames,
    as the feature extractor's attention mask counts them); the last token repeats the time before it."""
    frames = math.ceil(samples / HOP_LENGTH)
    weights = weights[None, :, prompt_len:, : frames // 2].float()  # [1, heads, outputs - 1, positions]
    outputs = weights.shape[2] + 1
    if outputs == 1:
        return np.zeros(1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = _median_filter((weights - mean) / std, median_filter_width)
    matrix = weights.mean(dim=1)[0]
    text_indices, time_indices = _dynamic_time_warping(-matrix.double().numpy())
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] * TIME_PRECISION
    # float32, as HF's timestamps tensor holds them (its rounding to 0.01 s then sees the same values)
    return np.concatenate([jump_times, jump_times[-1:]]).astype(np.float32).astype(np.float64)


def window_words(tokenizer: Any, token_ids: Sequence[int], times: np.ndarray, *, timestamp_begin: int, offset: float,
                 language: str, closed_only: bool = False) -> list[Word]:
    """The words of a window's output tokens (``times`` from :func:`token_times`), offset by the window's start:
    the text between timestamp tokens word by word, as the tokenizer's ``_decode_asr`` collates it. Special tokens
    (eos) are skipped; ``closed_only`` leaves out the text after the last timestamp (a window whose rest is decoded
    again)."""
    special = set(tokenizer.all_special_ids)
    words: list[Word] = []
    tokens: list[int] = []
    spans: list[tuple[float, float]] = []

    def collate() -> None:
        if tokens:
            timings = _collate_word_timestamps(tokenizer, tokens, spans, LANGUAGES.get(language, language), False)
            words.extend(Word(t["text"], *t["timestamp"]) for t in timings)
        tokens.clear()
        spans.clear()

    for i, token in enumerate(token_ids):
        if token >= timestamp_begin:
            collate()
        elif token not in special:
            tokens.append(token)
            start = round((times[i - 1] if i else 0.0) + offset, 2)
            spans.append((start, round(times[i] + offset, 2)))
    if not closed_only:
        collate()
    return words


def output_words(output: Any, tokenizer: Any, *, median_filter_width: int, timestamp_begin: int, offset: float,
                 samples: int, language: str, closed_only: bool, weights: torch.Tensor | None = None) -> list[Word]:
    """The words of a window's finished engine output (its request asked for the alignment heads' weights): see
    :func:`token_times` and :func:`window_words`. ``weights``: those of :func:`realignment_request`'s output, for an
    output that has none. Raises RuntimeError if there are no weights."""
    seq = output.outputs[0]
    weights = seq.alignment_weights if weights is None else weights
    if weights is None:
        raise RuntimeError(f"request {output.request_id!r} finished without its alignment heads' weights")
    times = token_times(weights, len(output.prompt_token_ids), samples, median_filter_width)
    return window_words(tokenizer, seq.token_ids, times, timestamp_begin=timestamp_begin, offset=offset,
                        language=language, closed_only=closed_only)


def realignment_request(output: Any, audio: tuple[np.ndarray, int],
                        heads: list[list[int]]) -> tuple[TokensPrompt, SamplingParams]:
    """The request that gives a finished window's alignment weights when its output came without them: its request
    was preempted between its last sampled token and the engine's commit (async decode), when its cross blocks were
    already gone. Its decoder prompt is the window's prompt and output tokens but the last, over the window's
    ``audio`` again, for one token: the engine's pass at its end covers exactly the rows the window's own would have
    (and a one-token request finishes in the step of its prefill, committed in that step: it keeps its weights)."""
    tokens = [*output.prompt_token_ids, *output.outputs[0].token_ids[:-1]]
    return ({"prompt_token_ids": tokens, "multi_modal_data": {"audio": audio}},
            SamplingParams(temperature=0.0, max_tokens=1, extra_args={"alignment_heads": heads}))
