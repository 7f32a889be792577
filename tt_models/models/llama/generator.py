"""The TT vLLM generator classes of the Llama family (the contract of ``research/contract.md`` section 9).

Prefill rows arrive unpadded (``n`` requests) with stale tails in token and page-table rows; decode
arrives padded to ``max_batch_size`` with ``start_pos = -1`` and zero page-table rows in padding rows. A model with
sliding-window layers takes a page table per KV-cache group in both (``page_tables_per_group`` or the plugin's
``page_tables_per_layer``; see :meth:`~tt_models.tt.generator.Generator.get_kv_cache_spec`).
"""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import use
from tt_models.tt.decode_inputs import to_device
from tt_models.tt.generator import Generator, as_torch
from tt_models.tt.lm_head import last_row_logits
from tt_models.tt.model_config import DecoderArgs
from tt_models.tt.paged_inputs import PrefillChunk


class LlamaForCausalLM(Generator):
    """Llama-family text generation on TT-NN."""

    model_capabilities = {"supports_prefix_caching": True, "supports_sample_on_device": True,
                          "supports_async_decode": True}

    @classmethod
    def layer_windows(cls, hf_config: Any) -> list[int | None]:
        args = DecoderArgs.from_hf(hf_config, max_batch_size=1, max_seq_len=1)
        return [args.window(layer) for layer in range(args.n_layers)]

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1,
                        optimizations: str | None = None) -> "LlamaForCausalLM":
        """Build from HF-named weights already in memory."""
        return cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, lambda device, users: LlamaModel(
            hf_config, state, device, max_batch_size=users, max_seq_len=max_seq_len, optimizations=optimizations,
            pad_hidden=True))

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the prefill path at one block and at each of :meth:`prefill_trace_lengths`, and with
        ``enable_trace`` capture the traces of the latter (logits on the device for sampling there with
        ``can_sample_on_device``, else for the host); the page table is all ``-1``, so nothing is written to the
        cache."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            cache = kv_cache[replica]
            block_size = cache[0][0].shape[2]
            captured = self.prefill_trace_lengths(model.args.max_seq_len)
            with use(device):
                for length in ([] if enable_trace else [block_size]) + captured:
                    chunk = model.prefill_chunk(torch.full((-(-length // block_size),), -1, dtype=torch.int32), 0,
                                                length, cache)
                    inputs = model.prefill_inputs(torch.zeros(length, dtype=torch.int64), chunk)

                    def forward(device_inputs: dict[str, Any], chunk: PrefillChunk = chunk) -> Any:
                        return model.prefill_device(device_inputs, chunk, cache, can_sample_on_device)

                    if enable_trace:
                        self.capture_prefill(replica, inputs, forward, mode=can_sample_on_device)
                    else:
                        forward(to_device(inputs, device))

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any,
                        start_pos: Any = None, enable_trace: bool = False, empty_slots: Any = None,
                        sampling_params: Any = None, page_tables_per_group: Any = None,
                        page_tables_per_layer: Any = None, **kwargs: Any) -> Any:
        """Logits ``[n, 1, V]`` of each row's last position ``prompt_lens[i] - 1``; with ``sampling_params``,
        tokens ``[n]`` sampled on the device (``(tokens, log_probs)`` when a row asks for log-probs). With
        ``enable_trace`` a row from position 0 whose tile-padded length warm-up captured replays that trace."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        groups = self.group_page_tables(page_tables_per_group, page_tables_per_layer)
        tables = [as_torch(page_table, torch.int32)] if groups is None else groups
        on_device = sampling_params is not None
        out = []
        for row, (start, end, replica) in enumerate(rows):
            model, cache, device = self.models[replica], kv_cache[replica], self.devices[replica]
            with use(device):
                group_chunks = [model.prefill_chunk(table[row], start, end, cache) for table in tables]
                chunk = group_chunks[0]

                def forward(device_inputs: dict[str, Any], chunk: PrefillChunk = chunk) -> Any:
                    return model.prefill_device(device_inputs, chunk, cache, on_device)

                inputs = model.prefill_inputs(tokens[row], chunk, None if groups is None else group_chunks)
                # A trace bakes its chunk's start in (plain causal attention from 0): resumed chunks run eagerly.
                logits = self.run_prefill(replica, inputs, forward, mode=on_device,
                                          traced=enable_trace and chunk.start == 0)
                out.append(last_row_logits(logits, chunk, model.lm_head, device, on_device))
        if on_device:
            return self.sample_prefill(out, rows, tokens, sampling_params)
        return torch.stack(out)[:, None, :]


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2 (biased Q/K/V projections) on the Llama-family blocks."""


class Qwen3ForCausalLM(LlamaForCausalLM):
    """Qwen3 (dense: RMSNorms of each Q and K head, no Q/K/V bias) on the Llama-family blocks."""


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3-MoE (Qwen3's attention; routed experts in its sparse layers: :mod:`tt_models.tt.moe`) on the
    Llama-family blocks."""


class GptOssForCausalLM(LlamaForCausalLM):
    """GPT-OSS (routed experts in every layer, their weights MXFP4 in HF's checkpoints: dequantized at load; biased
    Q/K/V/O projections; attention sinks; sliding-window and full layers alternating; YaRN rotary) on the
    Llama-family blocks."""


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral (sliding-window attention when its config sets one) on the Llama-family blocks."""
