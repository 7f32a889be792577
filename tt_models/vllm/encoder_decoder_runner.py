"""vllm-tt-plugin's model runner for encoder-decoder classes (Whisper, BART, MBart): paged cross-attention under TT
vLLM, selected through :class:`tt_models.vllm.encoder_decoder_worker.TTEncoderDecoderWorker`.

vLLM's V1 scheduler already does the encoder-decoder half: one static cross allocation per request
(``CrossAttentionManager``, freed with the request and on preemption), the encoder inputs scheduled on the request's
first step only (so a recomputed request reruns its encoder). The plugin's runner refuses these models and assumes
decoder-only in a few places (``../shared/research/encdec_vllm.md``); this subclass changes exactly those:

- the constructor's refusal, and lane data parallel refused instead (its input builder is the plugin's own);
- the KV pool: vLLM's groups are the self layers (``FullAttentionSpec``) and the cross layers (``CrossAttentionSpec``),
  layer ``j``'s self and cross sharing one tensor: the contract's one pool per decoder layer, one block-id space;
- block tables as wide as ``max(max_model_len, max_cross_attn_tokens) / block_size`` (the plugin cuts them to the
  decoder length), the self group's as ``page_table``, the cross group's as ``cross_page_table``;
- every step's ``cross_page_table`` and ``encoder_lens`` (padding rows 0), prefill's ``encoder_inputs`` (the
  request's features on its first step, else None) through the model input's ``multi_modal_kwargs``, which
  ``submit_prefill`` forwards as they are; decode through :class:`CrossInputsDecodeController`;
- the tasks: ``transcription`` for a transcription class;
- the generation config's token rules (Whisper's suppressed tokens) applied as tt-models' engine applies them
  (:mod:`tt_models.vllm.generation_rules`), sampling on the host for such a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from vllm.config import ModelConfig, VllmConfig
from vllm.model_executor.models.interfaces import supports_transcription
from vllm.tasks import GenerationTask
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_cache_interface import CrossAttentionSpec, FullAttentionSpec, KVCacheConfig
from vllm.v1.sample.logits_processor import LogitsProcessors
from vllm_tt_plugin.async_decode import TTAsyncDecodeController, TTDecodeSubmission
from vllm_tt_plugin.config import get_tt_data_parallel_size
from vllm_tt_plugin.input_batch import InputBatch
from vllm_tt_plugin.model_input import TTModelInput
from vllm_tt_plugin.model_runner import TTModelRunner

from tt_models.vllm.generation_rules import GenerationConfigRules, generation_rules

# The class's encoder input (``encoder_input_key``) -> the field of vLLM's multimodal item holding it.
VLLM_ENCODER_FIELDS = {"input_features": "input_features", "input_ids": "encoder_input_ids"}


class TTEncoderDecoderModelRunner(TTModelRunner):
    def __init__(self, vllm_config: VllmConfig, **kwargs: Any) -> None:
        if vllm_config.parallel_config.data_parallel_size == 1 and get_tt_data_parallel_size(vllm_config) > 1:
            raise ValueError("encoder-decoder models do not run in the plugin's lane data parallel mode "
                             "(additional_config tt.data_parallel > 1 in one engine); use --data-parallel-size "
                             "(one engine per submesh) or a single replica")
        with _constructed_as_decoder_only(vllm_config.model_config):
            super().__init__(vllm_config, **kwargs)
        self.async_decode = CrossInputsDecodeController(self)
        self.has_generation_rules = any(generation_rules(vllm_config))
        if self.has_generation_rules:
            rules = GenerationConfigRules(vllm_config, torch.device("cpu"), is_pin_memory=False)
            self._host_logitsprocs = LogitsProcessors([*self._host_logitsprocs.all, rules])

    def check_perform_device_sampling(self, is_decode: bool, has_structured_outputs: bool) -> bool:
        """On the host where the generation config has token rules (Whisper), which device sampling would skip."""
        return not self.has_generation_rules and super().check_perform_device_sampling(is_decode,
                                                                                        has_structured_outputs)

    def get_supported_generation_tasks(self) -> list[GenerationTask]:
        model_cls = type(self.model)
        if supports_transcription(model_cls):
            return ["transcription"] if model_cls.supports_transcription_only else ["generate", "transcription"]
        return ["generate"]

    def initialize_kv_cache(self, kv_cache_config: KVCacheConfig) -> None:
        groups = kv_cache_config.kv_cache_groups
        kinds = [type(group.kv_cache_spec) for group in groups]
        if sorted(kind.__name__ for kind in kinds) != ["CrossAttentionSpec", "FullAttentionSpec"]:
            raise ValueError(f"an encoder-decoder KV cache has one self-attention and one cross-attention group, got "
                             f"{[kind.__name__ for kind in kinds]}")
        self.kv_cache_config = kv_cache_config
        self.self_group, self.cross_group = kinds.index(FullAttentionSpec), kinds.index(CrossAttentionSpec)
        self_spec = groups[self.self_group].kv_cache_spec
        block_size = self_spec.block_size
        # One width for both tables: a trace replays at fixed shapes, and the cross table needs the encoder's.
        table_len = max(self.model_config.max_model_len, self.model.max_cross_attn_tokens)
        self.input_batch = InputBatch(
            max_num_reqs=self.tt_max_batch_size, max_model_len=table_len,
            max_num_batched_tokens=self.scheduler_config.max_num_batched_tokens, vocab_size=self.vocab_size,
            block_sizes=[block_size] * len(groups), kernel_block_sizes=[block_size] * len(groups),
            logitsprocs=self._host_logitsprocs)
        self.max_num_blocks_per_req = min(cdiv(table_len, block_size), kv_cache_config.num_blocks)
        self._layer_to_group_idx = None  # the class takes page_table and cross_page_table, not per-layer tables
        shape = self._kv_cache_shape(self_spec, kv_cache_config.num_blocks)
        self.kv_caches = self.model.allocate_kv_cache(shape, self_spec.dtype, len(groups[self.self_group].layer_names))

    def _gather_multi_modal_inputs(self, req_indices: list[int] | None = None) -> dict[str, Any]:
        """Prefill's ``encoder_inputs``: each row's encoder input (``input_features`` or BART's
        ``encoder_input_ids`` as ``input_ids``) on the request's first step (new, or recomputed after a preemption,
        which freed its cross blocks); None when its cross K/V is already in its cross blocks."""
        rows = range(self.input_batch.num_reqs) if req_indices is None else req_indices
        key = self.model.encoder_input_key
        encoder_inputs = []
        for row in rows:
            state = self.requests[self.input_batch.req_ids[row]]
            if state.num_computed_tokens > 0:
                encoder_inputs.append(None)
                continue
            # Missing data would leave the row attending whatever its cross blocks held: fail loudly instead.
            if len(state.mm_features) != 1 or state.mm_features[0].data is None:
                raise RuntimeError(f"request {state.req_id}: {len(state.mm_features)} encoder inputs reached the "
                                   "runner (with data); an encoder-decoder request's first step needs exactly one")
            encoder_inputs.append({key: state.mm_features[0].data[VLLM_ENCODER_FIELDS[key]].data})
        return {"encoder_inputs": encoder_inputs}

    def _prepare_model_inputs(self, scheduler_output: Any, grammar_output: Any) -> TTModelInput:
        model_input = super()._prepare_model_inputs(scheduler_output, grammar_output)
        rows = model_input.input_tokens.shape[0]  # a decode batch is padded to max_num_seqs
        encoder_lens = torch.zeros(rows, dtype=torch.int32)
        for row, req_id in enumerate(self.input_batch.req_ids[: self.input_batch.num_reqs]):
            encoder_lens[row] = sum(feature.mm_position.length for feature in self.requests[req_id].mm_features)
        tables = model_input.block_tables_per_group
        cross_inputs = {"cross_page_table": tables[self.cross_group], "encoder_lens": encoder_lens}
        return replace(model_input, block_tables=tables[self.self_group], block_tables_per_layer=None,
                       multi_modal_kwargs={**model_input.multi_modal_kwargs, **cross_inputs})


class CrossInputsDecodeController(TTAsyncDecodeController):
    """The plugin's async decode controller, whose ``decode_forward`` call also carries the step's
    ``cross_page_table`` and ``encoder_lens``: the plugin's call has a fixed argument set, so for the duration of
    the submission the runner's model is seen through :class:`_WithDecodeInputs`. Submission runs on the engine's
    thread (async decode only defers the read), so nothing else sees the swap."""

    def submit_decode(self, model_input: TTModelInput, *, read_from_device: bool,
                      async_read: bool = False) -> TTDecodeSubmission:
        runner, model = self.runner, self.runner.model
        runner.model = _WithDecodeInputs(model, {key: model_input.multi_modal_kwargs[key]
                                                 for key in ("cross_page_table", "encoder_lens")})
        try:
            return super().submit_decode(model_input, read_from_device=read_from_device, async_read=async_read)
        finally:
            runner.model = model


class _WithDecodeInputs:
    def __init__(self, model: Any, decode_inputs: dict[str, Any]) -> None:
        self._model, self._decode_inputs = model, decode_inputs

    def decode_forward(self, **kwargs: Any) -> Any:
        return self._model.decode_forward(**kwargs, **self._decode_inputs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


@contextmanager
def _constructed_as_decoder_only(model_config: ModelConfig) -> Iterator[None]:
    """The plugin's constructor refuses ``is_encoder_decoder`` (a cached property of vLLM's ModelConfig) before
    anything else; it reads it nowhere else, and the scheduler keeps reading the true value."""
    model_config.__dict__["is_encoder_decoder"] = False
    try:
        yield
    finally:
        model_config.__dict__["is_encoder_decoder"] = True
