"""Whisper's generation config: what HF's Whisper ``generate`` and the engine read beyond the model config (the
decoder prompt's special tokens, the language and task tokens of a multilingual checkpoint, the timestamp rules),
as the hub's openai/whisper-* configs have it, derived from the tokenizer and the vocabulary size.

A CTranslate2 directory has no generation config: ``whisper_ct2`` builds it whole from these fields. An HF
directory's may lack them: ``save_pretrained`` of a model built from a config writes one from the model config
alone (``"_from_model_config": true``), and a directory may have none. The loader completes it
(:func:`completed_generation_config`) as far as the checkpoint's tokenizer allows: the model itself needs none of
these fields (under TT vLLM, vLLM's own processor builds the decoder prompt), so a directory of a config and weights
alone loads, and tt-models' engine refuses the requests that need what is missing (:func:`require_engine_fields`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from transformers import GenerationConfig, PretrainedConfig, PreTrainedTokenizerBase

MAX_LENGTH = 448  # the decoder's positions (max_target_positions) in every Whisper size
MAX_INITIAL_TIMESTAMP_INDEX = 50  # the hub's value for all openai/whisper-* checkpoints
MULTILINGUAL_VOCAB_SIZE = 51865  # English-only checkpoints have 51864 tokens (HF's rule too)
# The fields the engine's Whisper requests need (a multilingual checkpoint's languages and tasks too), and HF
# generate's others.
NEEDED = ("decoder_start_token_id", "eos_token_id", "no_timestamps_token_id")
NEEDED_MULTILINGUAL = ("lang_to_id", "task_to_id")
HF_ONLY = ("max_length", "prev_sot_token_id", "max_initial_timestamp_index", "return_timestamps", "forced_decoder_ids")


def whisper_generation_values(tokenizer: PreTrainedTokenizerBase | None, multilingual: bool,
                              lang_ids: Iterable[int] | None = None) -> dict[str, Any]:
    """The generation config's Whisper fields for a checkpoint with this tokenizer (all but the suppressed tokens,
    which are the checkpoint's own). Raises ValueError when there is no tokenizer, and naming a special token the
    tokenizer lacks.

    English-only: start ``<|startoftranscript|>`` forced to ``<|notimestamps|>`` next. Multilingual:
    ``<|startoftranscript|>``, the language (detected when not given), ``<|transcribe|>``; ``lang_to_id`` (default:
    every token between ``<|startoftranscript|>`` and ``<|translate|>``) and ``task_to_id`` let
    ``generate(language=..., task=...)`` work.
    """
    if tokenizer is None:
        raise ValueError("the checkpoint has no tokenizer to derive them from")
    eot = _token_id(tokenizer, "<|endoftext|>")
    no_timestamps = _token_id(tokenizer, "<|notimestamps|>")
    values: dict[str, Any] = dict(
        decoder_start_token_id=_token_id(tokenizer, "<|startoftranscript|>"),
        # The hub's files say 50257 here for both sizes; bos_token_id plays no part in Whisper generation.
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        max_length=MAX_LENGTH,
        no_timestamps_token_id=no_timestamps,
        prev_sot_token_id=_token_id(tokenizer, "<|startofprev|>"),
        max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
        return_timestamps=False,
        is_multilingual=multilingual,
    )
    if multilingual:
        transcribe, translate = _token_id(tokenizer, "<|transcribe|>"), _token_id(tokenizer, "<|translate|>")
        lang_ids = lang_ids or range(values["decoder_start_token_id"] + 1, translate)
        values.update(forced_decoder_ids=[[1, None], [2, transcribe]],
                      lang_to_id={tokenizer.convert_ids_to_tokens(i): i for i in lang_ids},
                      task_to_id={"transcribe": transcribe, "translate": translate})
    else:
        values.update(forced_decoder_ids=[[1, no_timestamps]])
    return values


def completed_generation_config(generation_config: GenerationConfig | None, config: PretrainedConfig,
                                tokenizer: PreTrainedTokenizerBase | None) -> GenerationConfig:
    """A copy of an HF Whisper directory's ``generation_config`` (None: the one HF makes from the model config) with
    every Whisper field it lacks derived from ``tokenizer``. When they cannot be derived (no tokenizer, or one
    without Whisper's special tokens), the missing fields stay unset: :func:`require_engine_fields` names them."""
    completed = (GenerationConfig.from_model_config(config) if generation_config is None
                 else copy.deepcopy(generation_config))
    if getattr(completed, "is_multilingual", None) is None:
        completed.is_multilingual = config.vocab_size >= MULTILINGUAL_VOCAB_SIZE
    missing = [field for field in [*_engine_fields(completed), *HF_ONLY] if getattr(completed, field, None) is None]
    if not missing:
        return completed
    try:
        values = whisper_generation_values(tokenizer, completed.is_multilingual)
    except ValueError:
        return completed
    for field in missing:
        setattr(completed, field, values[field])
    return completed


def require_engine_fields(generation_config: GenerationConfig | None,
                          tokenizer: PreTrainedTokenizerBase | None) -> None:
    """Raises ValueError naming the fields the engine's Whisper requests need (the default decoder prompt, the
    timestamp rules, the language tokens) that ``generation_config`` lacks, and why ``tokenizer`` did not supply
    them."""
    lacking = [field for field in _engine_fields(generation_config) if getattr(generation_config, field, None) is None]
    if not lacking:
        return
    message = f"Whisper's generation config lacks {', '.join(lacking)}"
    try:
        whisper_generation_values(tokenizer, bool(getattr(generation_config, "is_multilingual", False)))
    except ValueError as error:
        raise ValueError(f"{message}, and {error}") from None
    raise ValueError(message)


def _engine_fields(generation_config: GenerationConfig | None) -> list[str]:
    return [*NEEDED, *(NEEDED_MULTILINGUAL if getattr(generation_config, "is_multilingual", False) else ())]


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id and token != tokenizer.unk_token:
        raise ValueError(f"the Whisper tokenizer has no {token}")
    return token_id
