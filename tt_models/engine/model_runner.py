"""Runs scheduled steps on a generator class, only through the TT vLLM contract (plus swap).

It builds the generator as TT vLLM's runner does (``initialize_vllm_model``'s arguments, weights already in
memory via ``from_state_dict``), allocates the KV pool with ``allocate_kv_cache`` (a model with sliding-window
layers, with ``free_out_of_window_blocks``: ``allocate_kv_cache_per_layer``, one K/V pair shared by the ``j``-th
layer of every KV-cache group, as TT vLLM's hybrid allocation; each step then hands it ``page_tables_per_group``),
keeps the persistent
input batch in step with the scheduler's sequences, and turns each step into one ``prefill_forward`` or
``decode_forward`` call whose arguments :class:`InputBatch` builds the way TT vLLM builds them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
)

from tt_models.checkpoints import Checkpoint
from tt_models.engine.config import (
    HOST_KV_CACHE_BYTES, EngineConfig, KVShape, decoder_config, has_prompt_images, is_image_text, kv_shape,
    max_encoder_len,
    uses_cross_attention, uses_mrope,
)
from tt_models.engine.input_batch import InputBatch, page_table_width
from tt_models.engine.kv_blocks import most_blocks_held
from tt_models.engine.request import Sequence
from tt_models.engine.scheduler import SchedulerOutput
from tt_models.tt.memory import bytes_per_chip, dram_per_chip
from tt_models.runtime import backend_of, close_device, open_device


def generator_classes() -> dict[str, type]:
    """The generator class of each HF architecture (those ``generator_vllm.py`` exports to TT vLLM)."""
    from tt_models.models.bart.generator import BartForConditionalGeneration, MBartForConditionalGeneration
    from tt_models.models.gemma3.generator import Gemma3ForCausalLM, Gemma3ForConditionalGeneration
    from tt_models.models.llama.generator import (GptOssForCausalLM, LlamaForCausalLM, MistralForCausalLM,
                                                  Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)
    from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration
    from tt_models.models.mllama.generator import MllamaForConditionalGeneration
    from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration
    from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration
    from tt_models.models.whisper.generator import WhisperForConditionalGeneration

    return {cls.__name__: cls for cls in (BartForConditionalGeneration, Gemma3ForCausalLM, GptOssForCausalLM,
                                          Gemma3ForConditionalGeneration, MBartForConditionalGeneration,
                                          LlamaForCausalLM, MistralForCausalLM, Mistral3ForConditionalGeneration,
                                          MllamaForConditionalGeneration,
                                          Qwen2ForCausalLM, Qwen2_5_VLForConditionalGeneration, Qwen3ForCausalLM,
                                          Qwen3MoeForCausalLM, Qwen3VLForConditionalGeneration,
                                          WhisperForConditionalGeneration)}


def generator_class(hf_config: Any) -> type:
    """The generator class of the config's architecture."""
    classes = generator_classes()
    archs = list(getattr(hf_config, "architectures", None) or [])
    if not archs:  # a config without architectures (GGUF): the model type's generation class in HF's auto maps
        archs = [names[hf_config.model_type] for names in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                           MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
                                                           MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
                 if hf_config.model_type in names]
    for arch in archs:
        if arch in classes:
            return classes[arch]
    raise ValueError(f"unsupported architecture {archs or hf_config.model_type!r}: tt-models serves {sorted(classes)}")


class ModelRunner:
    def __init__(self, checkpoint: Checkpoint, config: EngineConfig, *, backend: str | None = None,
                 optimizations: str | None = None, generator: Any = None,
                 mesh_shape: tuple[int, int] | None = None) -> None:
        """``generator``: an already built object with the contract's methods (on its own device), used instead
        of building the checkpoint's class (tests and benchmarks of the engine alone pass one that does no work).
        ``mesh_shape``: the device (or host) mesh, split into ``data_parallel_size`` submeshes, each one
        tensor-parallel replica; default ``(1, data_parallel_size)``."""
        hf_config = checkpoint.config
        self.config = config
        self.hf_config = hf_config
        self.vocab_size: int = decoder_config(hf_config).vocab_size
        self.uses_cross = uses_cross_attention(hf_config)
        self.image_text = is_image_text(hf_config)
        self.prompt_images = has_prompt_images(hf_config)
        self.mrope = uses_mrope(hf_config)
        self.device = None
        replicas = config.data_parallel_size
        if generator is None:
            self.device = open_device(backend, mesh_shape=mesh_shape or (1, replicas))
            generator = generator_class(hf_config).from_state_dict(
                hf_config, checkpoint.state_dict, self.device, config.max_num_seqs, max_seq_len=config.max_model_len,
                optimizations=optimizations, tt_data_parallel=replicas)
        self.model = generator
        devices = getattr(generator, "devices", None)  # a stand-in generator may have none: one chip
        shape = kv_shape(hf_config).per_chip(devices[0].get_num_devices() if devices else 1)
        groups = getattr(generator, "kv_cache_groups", None)
        self.kv_groups = groups(hf_config) if groups is not None and config.free_out_of_window_blocks else None
        # Each KV-cache group's window: the block managers' tables, one per group.
        self.kv_windows = (None,) if self.kv_groups is None else self.kv_groups.windows
        if self.kv_groups is None:
            self.config = config = config.with_kv_pool(self._blocks_that_fit(shape), max_encoder_len(hf_config))
            self.kv_cache = self.model.allocate_kv_cache(
                (config.num_kv_blocks, shape.num_kv_heads, config.block_size, shape.head_dim), torch.bfloat16,
                shape.num_layers)
        else:  # a block holds a layer of each group: the groups' layer count of tensors (vLLM's hybrid layout)
            tensors = max(len(layers) for layers in self.kv_groups.layers)
            self.config = config = self._grouped_kv_pool(self._blocks_that_fit(replace(shape, num_layers=tensors)))
            self.kv_cache = self.model.allocate_kv_cache_per_layer(
                [((config.num_kv_blocks, shape.num_kv_heads, config.block_size, shape.head_dim), torch.bfloat16, j)
                 for j in self.kv_groups.shared_tensors])
        max_cross = -(-self.model.max_cross_attn_tokens // config.block_size) if self.uses_cross else 0
        self.batch = InputBatch(config.max_num_seqs, config.max_model_len, config.block_size,
                                page_table_width(config.max_model_len, config.block_size, config.num_kv_blocks),
                                max_cross_blocks=max_cross, cross_optional=self.image_text)
        self.slots_per_replica = config.max_num_seqs // replicas
        self._host_kv: dict[tuple[int, int], torch.Tensor] = {}  # swapped-out blocks by (replica, host block id)
        self._row_order = np.arange(config.max_num_seqs, dtype=np.int32).tobytes()  # rows 0, 1, ... as bytes
        self._table_tails: dict[str, tuple[int, int, int]] = {}  # each row's tables as last synced (table_tail)
        # The KV-cache groups' tables past group 0's (which is the batch's own block table), row = slot.
        self._group_tables = np.zeros((len(self.kv_windows) - 1, *self.batch.block_table.shape), dtype=np.int32)
        # Async decode sampled on the device: the rows, sequences and positions of the next decode step if the batch
        # stays as the last one left it; a step that matches runs with ``reset_batch=False`` (the generator feeds its
        # sampled tokens back on the device, as under TT vLLM's async decode). A row joining, leaving or moving, a
        # step sampled on the host or a prefill step resets it.
        self._steady: tuple | None = None
        # TT vLLM's per-row sampling parameters for a step sampled greedily on the device.
        self._greedy = SimpleNamespace(temperature=[0.0] * config.max_num_seqs, top_k=[1] * config.max_num_seqs,
                                       top_p=[1.0] * config.max_num_seqs)

    def _grouped_kv_pool(self, blocks_that_fit: int) -> EngineConfig:
        """The resolved config with its default KV pool for KV-cache groups: every slot's request at full length as
        the groups hold it once their out-of-window blocks are dropped (:func:`most_blocks_held`), but no more than
        ``blocks_that_fit``, and at least one request's prompt of ``max_model_len`` in every group (what a
        recomputation admits), plus the null block."""
        config = self.config
        if config.num_kv_blocks is not None:
            return config
        size, length = config.block_size, config.max_model_len
        one_request = len(self.kv_windows) * -(-length // size)
        held = most_blocks_held(self.kv_windows, size, length)
        blocks = 1 + max(one_request, min(config.max_num_seqs // config.data_parallel_size * held, blocks_that_fit))
        return replace(config, num_kv_blocks=blocks,
                       num_host_kv_blocks=blocks if config.num_host_kv_blocks is None else config.num_host_kv_blocks)

    def _blocks_that_fit(self, shape: KVShape) -> int:
        """KV blocks one chip holds in the DRAM its replica's weights leave, less a tenth kept for activations, trace
        and program buffers; on the host backend (whose KV lives in host memory) at most ``HOST_KV_CACHE_BYTES``
        worth."""
        block = shape.block_bytes(self.config.block_size)
        if self.device is None or backend_of(self.device) == "host":  # a generator given ready-made: the host's cap
            return HOST_KV_CACHE_BYTES // block
        free = dram_per_chip(self.device) * 9 // 10 - bytes_per_chip(self.model.models[0])
        return max(0, free) // block

    def close(self) -> None:
        if self.device is not None:
            close_device(self.device)
            self.device = None

    # The batch.

    def remove(self, seq: Sequence) -> None:
        if seq.key in self.batch.row_of:
            self.batch.remove_request(seq.key)
            del self._table_tails[seq.key]

    def token_rows(self, seqs: list[Sequence]) -> list[int]:
        """Each sequence's row for :meth:`append_tokens`: -1 for a sequence without one (a new fork gets its row,
        with its tokens, when it is next scheduled)."""
        row_of = self.batch.row_of
        return [row_of.get(seq.key, -1) for seq in seqs]

    def append_tokens(self, rows: list[int], tokens: list[int]) -> None:
        """Sampled tokens into the rows :meth:`token_rows` gave for their sequences, in one array update."""
        if -1 in rows:
            tokens = [t for t, row in zip(tokens, rows) if row >= 0]
            rows = [row for row in rows if row >= 0]
        self.batch.append_tokens(rows, tokens)

    def _sync(self, seq: Sequence, kv: Any) -> None:
        """Put the sequence in a free row of its replica's slots if it has none, and bring its row's block table
        up to date: the table only grows, except that a copy-on-write replaces its last block, so comparing its
        length and last block with those the row got last time tells whether it changed (O(1))."""
        key, tail = seq.key, kv.table_tail(seq.seq_id)
        known = self._table_tails.get(key)
        if tail == known:
            return
        if known is None:
            cross = kv.cross_table(seq.request.request_id) if self.uses_cross else None
            first = seq.request.replica * self.slots_per_replica
            slot = self.batch.free_row(range(first, first + self.slots_per_replica))
            self.batch.add_request(key, seq.token_ids, kv.self_table(seq.seq_id), slot=slot, cross_block_ids=cross,
                                   encoder_len=seq.request.encoder_len, num_computed_tokens=seq.num_computed)
        elif self.kv_groups is None:
            table, size = kv.self_table(seq.seq_id), known[0]
            self.batch.replace_last_block(key, table[size - 1])
            self.batch.append_blocks(key, table[size:])
        if self.kv_groups is not None:  # (dropped blocks change a table's head: each is written whole)
            tables, row = kv.group_tables(seq.seq_id), self.batch.row_of[key]
            self.batch.block_table[row, :len(tables[0])] = tables[0]
            self.batch.num_blocks[row] = len(tables[0])
            for group, table in enumerate(tables[1:]):
                self._group_tables[group, row, :len(table)] = table
        self._table_tails[key] = tail

    def _group_kwargs(self, page_table: torch.Tensor, rows: np.ndarray, padded: bool) -> dict[str, Any]:
        """``page_tables_per_group`` of a step whose ``page_table`` (group 0's) the batch built, for ``rows`` (of every
        slot when ``padded``: a decode step, rows not decoding zero); nothing without KV-cache groups."""
        if self.kv_groups is None:
            return {}
        if padded:
            tables = np.zeros_like(self._group_tables)
            tables[:, rows] = self._group_tables[:, rows]
        else:
            tables = self._group_tables[:, rows]
        return {"page_tables_per_group": [page_table, *map(torch.from_numpy, tables)]}

    # Steps.

    def prefill(self, out: SchedulerOutput, kvs: list[Any]) -> torch.Tensor:
        """Run a prefill step (``kvs``: each replica's block manager); returns float32 logits
        ``[len(out.scheduled), vocab]`` at each row's last token. (A decode step is :meth:`launch`, then
        :meth:`collect`.)"""
        step = self._prepare(out, kvs)
        self._steady = None  # as TT vLLM resets after any prefill step
        encoder_inputs = None
        if self.uses_cross:
            encoder_inputs = [None if seq.request.encoder_cached else seq.request.inputs.encoder_input
                              for seq, _ in out.scheduled]
        kwargs = self.batch.prefill_kwargs(step, encoder_inputs)
        kwargs.update(self._group_kwargs(kwargs["page_table"], step.rows, padded=False))
        if self.image_text:
            logits = self._prefill_image_text(kwargs, [seq.request for seq, _ in out.scheduled])
        elif self.prompt_images:
            logits = self._prefill_prompt_images(kwargs, [seq.request for seq, _ in out.scheduled])
        else:
            logits = self.model.prefill_forward(**kwargs, kv_cache=self.kv_cache)
        self.batch.advance(step)
        return logits[:, 0, : self.vocab_size].float()

    def launch(self, out: SchedulerOutput, kvs: list[Any], on_device: bool = False, ahead: bool = False,
               feed: Callable[[], None] | None = None) -> tuple[Any, Any, bool]:
        """Issue a decode step without reading its output (``read_from_device=False``): on a device the host is free
        until :meth:`collect`. ``on_device``: every row is sampled greedily on the device (tokens come back).
        ``ahead``: the previous decode step, of the same rows, is not read yet: each row's input token is the one
        that step samples, which the model feeds back itself (``reset_batch=False``), or which ``feed`` writes into
        the batch: it runs once every other argument of this step is built (its block tables too), before its tokens
        are read from the batch."""
        step = self._prepare(out, kvs, ahead)
        kwargs = self.batch.decode_kwargs(step)
        kwargs.update(self._group_kwargs(kwargs["page_table"], step.rows, padded=True))
        if on_device:
            kwargs["sampling_params"] = self._greedy
            if self.config.async_decode:
                kwargs["reset_batch"] = _layout(step) != self._steady
        if ahead and feed is None and kwargs.get("reset_batch") is not False:
            raise RuntimeError("a decode step launched ahead of the previous one's tokens must keep the batch layout "
                               "and sample on the device")
        self._steady = _layout(step, ahead=1) if on_device and self.config.async_decode else None
        if self.image_text:
            masks = [(None, None)] * self.config.max_num_seqs
            for seq, _ in out.scheduled:
                masks[self.batch.row_of[seq.key]] = seq.request.vision_masks
            kwargs.update(cross_attention_masks=[m[0] for m in masks],
                          full_text_row_masked_out_mask=[m[1] for m in masks])
        if self.mrope:  # every row's delta at every step: the model then keeps no state across steps
            deltas = [0] * self.config.max_num_seqs
            for seq, _ in out.scheduled:
                deltas[self.batch.row_of[seq.key]] = seq.request.rope_delta
            kwargs["rope_deltas_all_users"] = deltas
        if feed is not None:  # all else is built while the step in flight computes: only its tokens come after
            feed()
            kwargs["tokens"] = self.batch.decode_tokens(step)
        tt_out = self.model.decode_forward(**kwargs, kv_cache=self.kv_cache, read_from_device=False)
        self.batch.advance(step)
        return tt_out, step.rows, on_device

    def collect(self, launched: tuple[Any, Any, bool]) -> tuple[torch.Tensor, np.ndarray | None]:
        """A launched decode step's float32 logits ``[B, V]``, or its tokens ``[B]`` when sampled on the device
        (waits for the device), and the row of each scheduled sequence in them: None when they are the first rows
        in order (the logits are then exactly theirs). The caller picks rows, so that a greedy batch spread over
        data-parallel slots is not copied out first."""
        tt_out, rows, on_device = launched
        if on_device:
            tokens = self.model.process_decode_output_host(self.model.read_decode_output(tt_out), is_tokens=True)
            return torch.as_tensor(tokens).reshape(-1).long(), rows
        logits = self.model.process_decode_output_host(self.model.read_decode_output(tt_out))[:, 0, : self.vocab_size]
        rows = rows.astype(np.int32, copy=False)
        if rows.tobytes() == self._row_order[:rows.nbytes]:  # (a bytes compare: a tenth of np.array_equal's time)
            return logits[:len(rows)].float(), None
        return logits.float(), rows

    def _prepare(self, out: SchedulerOutput, kvs: list[Any], ahead: bool = False) -> Any:
        self.execute_swaps(out)
        for seq, _ in out.scheduled:
            self._sync(seq, kvs[seq.request.replica])
        if out.is_prefill:
            return self.batch.prepare({seq.key: tokens for seq, tokens in out.scheduled})
        return self.batch.prepare_decode([seq.key for seq, _ in out.scheduled], ahead)

    def _prefill_image_text(self, kwargs: dict[str, Any], requests: list[Any]) -> torch.Tensor:
        """The image+text contract: ``images`` instead of encoder inputs (None once a request's vision K/V is in
        its cross blocks, which its masks from that prefill then stand for); the masks it returns are kept."""
        encoder_inputs = kwargs.pop("encoder_inputs")
        kwargs.pop("encoder_lens")
        masks = [r.vision_masks[0] for r in requests]
        for i, request in enumerate(requests):
            if masks[i] is None and request.encoder_cached and request.encoder_len:
                # Its vision tokens came from an encode instance (tt_models.disagg): only the mask is computed here.
                masks[i] = self.model.image_mask(request.inputs.encoder_input["image"])
        logits, masks, text_rows = self.model.prefill_forward(
            **kwargs, images=[None if e is None else [e["image"]] for e in encoder_inputs],
            cross_attention_masks=masks, kv_cache=self.kv_cache)
        for request, mask, text_row in zip(requests, masks, text_rows):
            request.vision_masks = (mask, text_row)
        return logits

    def _prefill_prompt_images(self, kwargs: dict[str, Any], requests: list[Any]) -> torch.Tensor:
        """TT vLLM's V1 image contract (Qwen2.5-VL, Gemma 3, Mistral 3): a row's images (None: text only) at every
        prefill whose chunk ends past its first image token, so a chunk holding image tokens, a copy-on-write rebuild
        or a recomputation after preemption reruns the vision tower on them (and Qwen2.5-VL's later chunks get the
        images' positions); M-RoPE deltas returned are kept per request for decode."""
        image_token = self.model.image_token_id
        images = [r.inputs.prompt_images if r.inputs.prompt_images is not None
                  and image_token in r.inputs.prompt_token_ids[:end] else None
                  for r, end in zip(requests, kwargs["prompt_lens"].tolist())]
        keys = ("pixel_values", "image_grid_thw") if self.mrope else ("pixel_values",)
        out = self.model.prefill_forward(**kwargs, **{key: [None if i is None else i[key] for i in images]
                                                      for key in keys}, kv_cache=self.kv_cache)
        if not self.mrope:
            return out
        logits, deltas = out
        for request, delta in zip(requests, deltas.tolist()):
            request.rope_delta = delta
        return logits

    def check_cross_heads(self, heads: Any) -> None:
        """Raises ValueError unless ``heads`` are ``[layer, head]`` pairs of the model's cross-attention (on
        single-chip replicas: the pass reads one chip's heads)."""
        config = self.hf_config
        layers, n_heads = getattr(config, "decoder_layers", 0), getattr(config, "decoder_attention_heads", 0)
        if not self.uses_cross or self.image_text:
            raise ValueError("alignment_heads: the model has no encoder-decoder cross-attention")
        devices = getattr(self.model, "devices", None)
        if devices and devices[0].get_num_devices() > 1:
            raise ValueError("alignment_heads: cross-attention weights are computed on single-chip replicas only")
        if not isinstance(heads, (list, tuple)) or not heads or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(i, int) for i in p)
                and 0 <= p[0] < layers and 0 <= p[1] < n_heads for p in heads):
            raise ValueError(f"alignment_heads must be [layer, head] pairs of the decoder's {layers} layers of "
                             f"{n_heads} heads, got {heads!r}")

    def cross_attention_weights(self, seq: Sequence, kv: Any) -> torch.Tensor:
        """The cross-attention probabilities of the request's ``alignment_heads`` over the sequence's tokens but the
        last (``cross_attention_weights`` of the contract's extension), read from its request's cross blocks."""
        request = seq.request
        cross = torch.tensor([kv.cross_table(request.request_id)], dtype=torch.int32)
        return self.model.cross_attention_weights(self.kv_cache, [seq.token_ids[:-1]], cross, [request.encoder_len],
                                                  request.alignment_heads,
                                                  empty_slots=[request.replica * self.slots_per_replica])[0]

    def write_cross(self, states: torch.Tensor, cross_blocks: list[int], encoder_len: int, replica: int) -> None:
        """One request's encoder states, computed elsewhere, into its cross blocks on ``replica``
        (``write_cross_kv``, with a slot of that replica)."""
        self.model.write_cross_kv(self.kv_cache, [states], torch.tensor([cross_blocks], dtype=torch.int32),
                                  [encoder_len], empty_slots=[replica * self.slots_per_replica])

    def execute_swaps(self, out: SchedulerOutput) -> None:
        """Swap-outs first: their device blocks may be the ones a swap-in or this step writes next."""
        for replica, mapping in out.swap_out.items():
            device_blocks, host_blocks = zip(*mapping.items())
            (data,) = self.model.read_kv_blocks(self.kv_cache, device_blocks, replicas=[replica])
            for i, host in enumerate(host_blocks):
                self._host_kv[replica, host] = data[:, :, i]
        for replica, mapping in out.swap_in.items():
            host_blocks, device_blocks = zip(*mapping.items())
            data = torch.stack([self._host_kv.pop((replica, h)) for h in host_blocks], dim=2)
            self.model.write_kv_blocks(self.kv_cache, device_blocks, [data], replicas=[replica])


def _layout(step: Any, ahead: int = 0) -> tuple:
    """A decode step's rows, sequences and positions (``ahead`` steps later)."""
    return tuple(step.req_ids), step.rows.tobytes(), (step.positions + ahead).tobytes()
