"""BART and MBart as vLLM text-to-text models: the encoder's text as a one-item ``"text"`` modality.

vLLM 0.25.1 serves an encoder-decoder model only as a multimodal one: its scheduler gives a request's encoder input
(one multimodal item) its cross blocks and schedules it on the request's first step only, and tt-models' runner
hands that item to the class as ``encoder_inputs[i] = {"input_ids": ...}`` with ``encoder_lens[i]`` its placeholder
count. So, as vLLM's out-of-tree bart-plugin does, the encoder prompt becomes a ``"text"`` item: the processor
tokenizes it into ``encoder_input_ids`` and stands one placeholder per encoder position in the encoder prompt.

vLLM's renderer calls a processor only for a prompt carrying ``multi_modal_data``; for any other encoder prompt
(``{"encoder_prompt": "text" or token ids, ...}``, or a plain prompt, which is what ``/v1/completions`` sends)
``build_enc_dec_input`` leaves the encoder empty (and makes a plain prompt's tokens the decoder prompt).
:func:`register_bart` therefore also wraps the renderer's encoder-decoder tokenization step, for this processor
only, to move the encoder prompt into the ``"text"`` item before vLLM tokenizes it and checks its length against
``max_model_len`` (the decoder's limit; the encoder's is ``max_position_embeddings``, checked here).

Prompts then mean what they mean to tt-models' engine (``tt_models/engine/inputs.py``): encoder text tokenized with
special tokens (``<s> ... </s>``), token ids as given, 1 to ``max_position_embeddings`` of them; a plain prompt is
the encoder's, the decoder's default ``<DEC><BOS>`` (``[BOS]`` here, vLLM prepends ``<DEC>``:
``decoder_start_token_id``, else BOS); an explicit decoder prompt is tokenized by vLLM with special tokens and gets
``<DEC>`` when it lacks it. The request-level tokenization options (``add_special_tokens``,
``truncate_prompt_tokens``) apply to the decoder prompt only. Left to vLLM: its OpenAI server takes an
encoder-decoder request's encoder length as the prompt length (``extract_prompt_len``), so there an encoder prompt
longer than ``max_model_len`` is refused and ``max_tokens`` is capped at ``max_model_len`` minus the encoder length.
This module imports vLLM: only ``generator_vllm`` imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from transformers import BatchFeature
from vllm.config.multimodal import BaseDummyOptions
from vllm.inputs import MultiModalDataDict
from vllm.model_executor.models.interfaces import SupportsMultiModal
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
from vllm.multimodal.parse import (
    ModalityDataItems, MultiModalDataItems, MultiModalDataParser, ProcessorBatchItems,
)
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder, BaseProcessingInfo, EncDecMultiModalProcessor, PromptReplacement, PromptUpdate,
)
from vllm.renderers.base import BaseRenderer
from vllm.renderers.inputs import EncoderDecoderDictPrompt

__all__ = ["BartTextToText", "register_bart"]

MODALITY = "text"
PLACEHOLDER = 0  # the encoder prompt's token: one, expanded to one per encoder position

EncoderText = str | list[int]  # text, or token ids taken as given


class BartProcessingInfo(BaseProcessingInfo):
    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {MODALITY: 1}

    def get_data_parser(self) -> MultiModalDataParser:
        return EncoderTextParser()

    def get_mm_max_tokens_per_item(self, seq_len: int, mm_counts: Mapping[str, int]) -> Mapping[str, int]:
        # The scheduler's encoder budget, known without running dummy inputs through the processor.
        return {MODALITY: self.max_encoder_len}

    @property
    def max_encoder_len(self) -> int:
        return self.get_hf_config().max_position_embeddings


class EncoderTextItems(ProcessorBatchItems[EncoderText]):
    def __init__(self, data: Sequence[EncoderText]) -> None:
        super().__init__(data, MODALITY)


class EncoderTextParser(MultiModalDataParser):
    """``multi_modal_data={"text": text or token ids}``: one encoder prompt."""

    def _get_subparsers(self) -> Mapping[str, Callable[[Any], ModalityDataItems[Any, Any] | None]]:
        return {MODALITY: self._parse_encoder_text}

    @staticmethod
    def _parse_encoder_text(data: Any) -> EncoderTextItems:
        if isinstance(data, str) or (isinstance(data, list) and all(isinstance(t, int) for t in data)):
            return EncoderTextItems([data])
        raise TypeError(f"The encoder prompt must be text or a list of token ids, got {type(data).__name__}")


class BartMultiModalProcessor(EncDecMultiModalProcessor[BartProcessingInfo]):
    def create_encoder_prompt(self, prompt: str | list[int], mm_items: MultiModalDataItems) -> list[int]:
        return [PLACEHOLDER]

    def create_decoder_prompt(self, prompt: str | list[int], mm_items: MultiModalDataItems) -> list[int]:
        # The default decoder prompt (used when the request gives none): vLLM prepends <DEC> to it.
        return [self.info.get_hf_config().bos_token_id]

    def _call_hf_processor(self, prompt: str, mm_data: Mapping[str, object], mm_kwargs: Mapping[str, object],
                           tok_kwargs: Mapping[str, object]) -> BatchFeature:
        # BART has no HF processor: the encoder prompt is the placeholder, its item the token ids.
        outputs: dict[str, Any] = {"input_ids": [[PLACEHOLDER]]}
        items = mm_data.get(f"{MODALITY}s", [])
        if items:
            outputs["encoder_input_ids"] = [torch.tensor(self._encoder_ids(item)) for item in items]
        return BatchFeature(outputs)

    def _encoder_ids(self, item: EncoderText) -> list[int]:
        """The encoder's token ids, refused here (a ValueError naming the problem: vLLM rejects the request, a 400
        from the server) rather than in the engine, where a bad input would take every request down."""
        if isinstance(item, str):
            ids = self.info.get_tokenizer().encode(item, add_special_tokens=True) if item else []
        else:
            ids = item
        config = self.info.get_hf_config()
        if not ids:
            raise ValueError("The encoder prompt is empty")
        if len(ids) > self.info.max_encoder_len:
            raise ValueError(f"The encoder prompt (length {len(ids)}) is longer than the maximum encoder length of "
                             f"{self.info.max_encoder_len} ({config.model_type}'s max_position_embeddings)")
        bad = [t for t in ids if not 0 <= t < config.vocab_size]
        if bad:
            raise ValueError(f"Token id {bad[0]} in the encoder prompt is out of vocabulary: the model's token ids "
                             f"are 0 to {config.vocab_size - 1}")
        return list(ids)

    def _get_mm_fields_config(self, hf_inputs: BatchFeature,
                              hf_processor_mm_kwargs: Mapping[str, object]) -> Mapping[str, MultiModalFieldConfig]:
        return {"encoder_input_ids": MultiModalFieldConfig.batched(MODALITY)}

    def _get_prompt_updates(self, mm_items: MultiModalDataItems, hf_processor_mm_kwargs: Mapping[str, object],
                            out_mm_kwargs: MultiModalKwargsItems) -> Sequence[PromptUpdate]:
        def positions(item_idx: int) -> list[int]:
            return [PLACEHOLDER] * len(out_mm_kwargs[MODALITY][item_idx]["encoder_input_ids"].data)

        return [PromptReplacement(modality=MODALITY, target=[PLACEHOLDER], replacement=positions)]


class BartDummyInputsBuilder(BaseDummyInputsBuilder[BartProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return ""

    def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int],
                          mm_options: Mapping[str, BaseDummyOptions]) -> MultiModalDataDict:
        if not mm_counts.get(MODALITY):
            return {}
        return {MODALITY: [PLACEHOLDER] * self.info.max_encoder_len}  # the longest encoder prompt


class BartTextToText(SupportsMultiModal):
    """What vLLM asks of a BART class beside its processor (derived from after the generator base)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return None  # the encoder's text is never written into a chat's text


def _encoder_prompt_as_item(renderer: BaseRenderer, prompt: EncoderDecoderDictPrompt) -> EncoderDecoderDictPrompt:
    """``prompt`` with its encoder prompt's text or token ids moved into the ``"text"`` item, for this module's
    processor; the (empty) token ids left behind pass vLLM's length checks and reach the processor with the item."""
    encoder = prompt["encoder_prompt"]
    if not isinstance(renderer.mm_processor, BartMultiModalProcessor) or "multi_modal_data" in encoder:
        return prompt
    text = encoder["prompt_token_ids"] if "prompt_token_ids" in encoder else encoder["prompt"]
    rest = {key: value for key, value in encoder.items() if key not in ("prompt", "prompt_token_ids")}
    item = {**rest, "prompt_token_ids": [], "multi_modal_data": {MODALITY: text}}
    return {**prompt, "encoder_prompt": item}  # type: ignore[typeddict-item]


def _install_renderer_hook() -> None:
    """Wrap ``BaseRenderer``'s encoder-decoder tokenization (sync: ``vllm.LLM``; async: the server) once a process;
    it changes nothing for a renderer whose processor is not this module's."""
    tokenize, tokenize_async = BaseRenderer._tokenize_enc_dec_prompt, BaseRenderer._tokenize_enc_dec_prompt_async
    if getattr(tokenize, "_bart_encoder_item", False):
        return

    def _tokenize_enc_dec_prompt(self: BaseRenderer, prompt: EncoderDecoderDictPrompt, params: Any) -> Any:
        return tokenize(self, _encoder_prompt_as_item(self, prompt), params)

    async def _tokenize_enc_dec_prompt_async(self: BaseRenderer, prompt: EncoderDecoderDictPrompt,
                                             params: Any) -> Any:
        return await tokenize_async(self, _encoder_prompt_as_item(self, prompt), params)

    _tokenize_enc_dec_prompt._bart_encoder_item = True  # type: ignore[attr-defined]
    BaseRenderer._tokenize_enc_dec_prompt = _tokenize_enc_dec_prompt  # type: ignore[method-assign]
    BaseRenderer._tokenize_enc_dec_prompt_async = _tokenize_enc_dec_prompt_async  # type: ignore[method-assign]


_register_processor = MULTIMODAL_REGISTRY.register_processor(
    BartMultiModalProcessor, info=BartProcessingInfo, dummy_inputs=BartDummyInputsBuilder)

_C = TypeVar("_C", bound=type)


def register_bart(cls: _C) -> _C:
    """Class decorator: this module's processor on ``cls``, and the renderer's encoder prompts routed to it."""
    _install_renderer_hook()
    return _register_processor(cls)
