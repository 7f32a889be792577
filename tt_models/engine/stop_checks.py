"""Whether a request is done after its latest token, as vLLM 0.25.1 decides it: the scheduler's token checks
(``vllm/v1/core/sched/utils.py``), then the detokenizer's stop strings (``vllm/v1/engine/detokenizer.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from tt_models.engine.sampling import SamplingParams


def check_stop_tokens(token_ids: Sequence[int], params: SamplingParams,
                      eos_token_id: int | None) -> tuple[Literal["stop", "length"], int | None] | None:
    """The scheduler's token checks of :func:`check_stop` alone: ``(finish reason, stop reason)`` or None."""
    n = len(token_ids)
    if n < params.min_tokens:
        return None
    last = token_ids[-1]
    if last == eos_token_id and not params.ignore_eos and eos_token_id is not None:
        return "stop", None
    if last in params.stop_token_ids:
        return "stop", last
    if params.max_tokens is not None and n >= params.max_tokens:
        return "length", None
    return None


class StopCheck(NamedTuple):
    finished: bool
    reason: Literal["stop", "length"] | None  # vLLM's finish_reason
    stop_reason: int | str | None  # the stop token id or stop string; None for eos and length
    text: str  # the output text, cut as vLLM returns it


def check_stop(token_ids: Sequence[int], text: str, params: SamplingParams, eos_token_id: int | None,
               new_text_len: int | None = None) -> StopCheck:
    """Whether a request is done after its latest token, as vLLM decides it.

    ``token_ids`` are the request's output tokens (at least one), ``text`` their detokenized text and
    ``new_text_len`` how many of its trailing characters the latest token added (None: all of it). Call
    once per generated token: stop strings are searched only where they could end in the new text, and
    only once more than ``min_tokens`` tokens exist, as vLLM's detokenizer does.

    Order: the scheduler's token checks (``v1/core/sched/utils.py::check_stop``: nothing before
    ``min_tokens``, then eos unless ``ignore_eos``, ``stop_token_ids``, ``max_tokens`` -> "length"), then the
    detokenizer's stop strings (``v1/engine/detokenizer.py``), which override a "length" finish. A stop token
    ends the text before its own text unless ``include_stop_str_in_output``; a stop string likewise.
    """
    new = len(text) if new_text_len is None else new_text_len
    n = len(token_ids)
    reason, stop_reason = check_stop_tokens(token_ids, params, eos_token_id) or (None, None)
    if reason == "stop" and not params.include_stop_str_in_output:
        text, new = text[:len(text) - new], 0
    if params.stop and new and n > params.min_tokens:
        for stop_str in params.stop:
            # vLLM's check_stop_strings: a match must end inside the new characters.
            index = text.find(stop_str, 1 - new - len(stop_str))
            if index == -1:
                continue
            reason, stop_reason = "stop", stop_str
            if params.include_stop_str_in_output:
                index += len(stop_str)
            text = text[:index]
            break
    return StopCheck(reason is not None, reason, stop_reason, text)
