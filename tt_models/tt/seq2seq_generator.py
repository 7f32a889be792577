"""The TT vLLM contract for encoder-decoder models, with paged cross-attention.

Extension of the decoder-only contract (documented in docs/contract.md):
- ``max_cross_attn_tokens``: the largest encoder length (cross blocks per request: ceil(it / block_size)).
- ``prefill_forward(..., cross_page_table, encoder_inputs, encoder_lens)``: ``encoder_inputs[i]`` is the
  row's encoder input (``{"input_features": ...}`` or ``{"input_ids": ...}``), or ``None`` when the row's
  cross K/V is already in its cross blocks (a later chunk, a recomputation).
- ``decode_forward(..., cross_page_table, encoder_lens)``, padded like the self tables
  (``encoder_lens = 0`` in padding rows).
- ``encode_forward(encoder_inputs)``: encoder states only, for an encoder that runs apart (an encode instance
  of a disaggregated deployment, ``tt_models.disagg``).
- ``write_cross_kv(kv_cache, encoder_states, cross_page_table, encoder_lens, empty_slots=None)``: the cross K/V
  of encoder states computed elsewhere into the rows' cross blocks (of the replica owning each row's slot); a later
  ``prefill_forward`` takes those rows with ``encoder_inputs[i] = None``. ``write_cross_kv`` after
  ``encode_forward`` writes what a ``prefill_forward`` with the encoder input would have written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.runtime import use
from tt_models.tt.decode_inputs import HostInputs
from tt_models.tt.generator import Generator, as_torch
from tt_models.tt.model_config import Precision
from tt_models.tt.seq2seq import Seq2SeqArgs, Seq2SeqDecoder
from tt_models.tt.weights import as_tensor, to_host


@dataclass
class Seq2SeqModel:
    """One replica: an encoder (``forward(encoder_input) -> [1, 1, S, dim]``) and a :class:`Seq2SeqDecoder`."""

    args: Seq2SeqArgs
    precision: Precision
    encoder: Any
    decoder: Seq2SeqDecoder

    @property
    def n_layers(self) -> int:
        return self.args.decoder_layers

    @property
    def kv_geometry(self) -> tuple[int, int]:
        """``(KV heads, head_dim)`` of one chip's self and cross pools."""
        return self.decoder.heads.kv_per_chip, self.args.head_dim

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size


class Seq2SeqGenerator(Generator):
    model_capabilities = {"supports_sample_on_device": True, "supports_async_decode": True}
    max_cross_attn_tokens: int
    encoder_input_key: str  # "input_features" (audio) or "input_ids" (text)

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int = 448,
                              tt_data_parallel: int = 1, optimizations: str | None = None,
                              **kwargs: Any) -> "Seq2SeqGenerator":
        """Weights come from ``hf_config._name_or_path`` (an HF directory, local-cache id or checkpoint alias)."""
        state = load_hf_checkpoint(hf_config._name_or_path).state_dict
        return cls.from_state_dict(hf_config, state, mesh_device, max_batch_size, tt_data_parallel=tt_data_parallel,
                                   optimizations=optimizations)

    @classmethod
    def get_max_tokens_all_users(cls, *, max_model_len: int = 448, max_num_seqs: int = 32, **kwargs: Any) -> int:
        """KV tokens for every user at full length: its decoder tokens and, in its cross blocks, the longest
        encoder's positions."""
        return (max_model_len + cls.max_cross_attn_tokens) * max_num_seqs

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        tt_data_parallel: int = 1, optimizations: str | None = None,
                        max_seq_len: int | None = None) -> "Seq2SeqGenerator":
        """``max_seq_len`` (decoder tokens) may not exceed the decoder's learned positions."""
        def build(device: Any, users: int) -> Seq2SeqModel:
            args = Seq2SeqArgs.from_hf(hf_config, max_batch_size=users)
            if max_seq_len is not None and max_seq_len > args.max_target_positions:
                raise ValueError(f"max_seq_len {max_seq_len} exceeds the decoder's {args.max_target_positions} "
                                 "positions")
            precision = Precision.uniform(optimizations)
            return Seq2SeqModel(args, precision, cls.build_encoder(args, state, device, precision),
                                cls.build_decoder(args, state, device, precision))

        generator = cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, build)
        generator.max_cross_attn_tokens = generator.models[0].args.max_source_positions
        return generator

    @classmethod
    def build_encoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any, precision: Precision) -> Any:
        raise NotImplementedError

    @classmethod
    def build_decoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any,
                      precision: Precision) -> Seq2SeqDecoder:
        raise NotImplementedError

    def _encoder_input(self, entry: Any, row: int) -> torch.Tensor:
        if not isinstance(entry, dict) or self.encoder_input_key not in entry:
            raise ValueError(f"encoder_inputs[{row}] must be a dict with {self.encoder_input_key!r} (or None)")
        return torch.as_tensor(entry[self.encoder_input_key])

    def encode_forward(self, encoder_inputs: list[Any], **kwargs: Any) -> list[torch.Tensor]:
        """Encoder states ``[S_enc, dim]`` for each input (on the first replica)."""
        model, device = self.models[0], self.devices[0]
        with use(device):
            return [to_host(model.encoder.forward(self._encoder_input(entry, row)), device)[0, 0].float()
                    for row, entry in enumerate(encoder_inputs)]

    def write_cross_kv(self, kv_cache: Any, encoder_states: list[torch.Tensor], cross_page_table: Any,
                       encoder_lens: Any, empty_slots: Any = None, **kwargs: Any) -> None:
        """Row ``i``'s states ``[encoder_lens[i], dim]`` (as ``encode_forward`` gives them) into the cross blocks of
        ``cross_page_table[i]``, in the cache of the replica owning batch slot ``empty_slots[i]`` (default ``i``),
        as ``prefill_forward`` places rows."""
        cross_page_table, encoder_lens = as_torch(cross_page_table, torch.int32), as_torch(encoder_lens).tolist()
        if not len(encoder_states) == len(cross_page_table) == len(encoder_lens):
            raise ValueError(f"{len(encoder_states)} encoder states, {len(cross_page_table)} cross tables, "
                             f"{len(encoder_lens)} encoder_lens")
        dim = self.models[0].args.dim
        slots = range(len(encoder_lens)) if empty_slots is None else as_torch(empty_slots).tolist()
        for row, (states, length, slot) in enumerate(zip(encoder_states, encoder_lens, slots)):
            if not 0 < length <= self.max_cross_attn_tokens or tuple(states.shape) != (length, dim):
                raise ValueError(f"write_cross_kv row {row}: states of shape {list(states.shape)} for encoder_len "
                                 f"{length}; expected [{length}, {dim}] with 0 < encoder_len <= "
                                 f"{self.max_cross_attn_tokens}")
            replica = self.replica_of_slot(slot)
            model, device = self.models[replica], self.devices[replica]
            with use(device):
                model.decoder.fill_cross(as_tensor(states[None, None], device), length, cross_page_table[row],
                                         kv_cache[replica])

    def dummy_encoder_input(self, args: Seq2SeqArgs) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def cross_attention_weights(self, kv_cache: Any, tokens: list[Any], cross_page_table: Any, encoder_lens: Any,
                                heads: list[list[int]], empty_slots: Any = None,
                                **kwargs: Any) -> list[torch.Tensor]:
        """Row ``i``'s cross-attention probabilities of ``heads`` (``[layer, head]`` pairs, e.g. Whisper's alignment
        heads) over a teacher-forced pass of ``tokens[i]`` (decoder positions ``0 ..``), its cross K/V already in
        the cross blocks of ``cross_page_table[i]`` (on the replica owning slot ``empty_slots[i]``, default ``i``):
        host float32 ``[len(heads), len(tokens[i]), encoder_lens[i]]``. Writes nothing to the cache. (An extension
        of the contract, for word timestamps: ``Seq2SeqDecoder.cross_attention_weights``.)"""
        cross_page_table, encoder_lens = as_torch(cross_page_table, torch.int32), as_torch(encoder_lens).tolist()
        args = self.models[0].args
        bad = [pair for pair in heads if not (0 <= pair[0] < args.decoder_layers and 0 <= pair[1] < args.n_heads)]
        if not heads or bad:
            raise ValueError(f"cross-attention heads {bad or heads} are not [layer, head] pairs of this decoder "
                             f"({args.decoder_layers} layers of {args.n_heads} heads)")
        if self.devices[0].get_num_devices() > 1:
            raise ValueError("cross-attention weights are computed on single-chip replicas only")
        slots = range(len(tokens)) if empty_slots is None else as_torch(empty_slots).tolist()
        out = []
        for row_tokens, table, length, slot in zip(tokens, cross_page_table, encoder_lens, slots):
            replica = self.replica_of_slot(slot)
            with use(self.devices[replica]):
                out.append(self.models[replica].decoder.cross_attention_weights(
                    torch.as_tensor(row_tokens, dtype=torch.int64), table, int(length), kv_cache[replica],
                    [(int(layer), int(head)) for layer, head in heads]))
        return out

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the encoder and prefill paths. Every block written is ``-1`` (skipped by the fill ops), so
        the cache is untouched; the cross read goes to block 0 and its result is discarded."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            cache = kv_cache[replica]
            block_size = cache[0][0].shape[2]
            with use(device):
                states = model.encoder.forward(self._encoder_input(self.dummy_encoder_input(model.args), 0))
                length = states.shape[2]
                unwritten = torch.full((-(-length // block_size),), -1, dtype=torch.int32)
                model.decoder.fill_cross(states, length, unwritten, cache)
                model.decoder.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                                      torch.full((1,), -1, dtype=torch.int32), torch.zeros_like(unwritten), length,
                                      cache)

    def padding_decode_inputs(self, rows: int, table_width: int) -> dict[str, torch.Tensor]:
        return {"cross_page_table": torch.zeros(rows, table_width, dtype=torch.int32),
                "encoder_lens": torch.zeros(rows, dtype=torch.int32)}

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        cross_page_table: Any, encoder_inputs: list[Any], encoder_lens: Any,
                        enable_trace: bool = False, empty_slots: Any = None, sampling_params: Any = None,
                        **kwargs: Any) -> Any:
        """Logits ``[n, 1, V]`` of each row's last decoder position ``prompt_lens[i] - 1``; with
        ``sampling_params``, tokens sampled on the device (see ``Generator.sample_prefill``)."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table, cross_page_table = as_torch(page_table, torch.int32), as_torch(cross_page_table, torch.int32)
        encoder_lens = as_torch(encoder_lens).tolist()
        if not len(encoder_inputs) == len(encoder_lens) == len(rows):
            raise ValueError(f"{len(rows)} prefill rows, {len(encoder_inputs)} encoder_inputs, "
                             f"{len(encoder_lens)} encoder_lens")
        out = []
        for row, ((start, end, replica), entry, encoder_len) in enumerate(zip(rows, encoder_inputs, encoder_lens)):
            if not 0 < encoder_len <= self.max_cross_attn_tokens:
                raise ValueError(f"prefill row {row}: encoder_len {encoder_len} "
                                 f"outside 1..{self.max_cross_attn_tokens}")
            model, device, cache = self.models[replica], self.devices[replica], kv_cache[replica]
            with use(device):
                if entry is not None:
                    states = model.encoder.forward(self._encoder_input(entry, row))
                    if states.shape[2] != encoder_len:
                        raise ValueError(f"prefill row {row}: the encoder gives {states.shape[2]} positions, "
                                         f"encoder_lens says {encoder_len}")
                    model.decoder.fill_cross(states, encoder_len, cross_page_table[row], cache)
                out.append(model.decoder.prefill(tokens[row], start, end, page_table[row], cross_page_table[row],
                                                 encoder_len, cache, on_device=sampling_params is not None))
        if sampling_params is not None:
            return self.sample_prefill(out, rows, tokens, sampling_params)
        return torch.stack(out)[:, None, :]

    def decode_forward(self, *, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any, cross_page_table: Any,
                       encoder_lens: Any, enable_trace: bool = False, read_from_device: bool = True,
                       sampling_params: Any = None, prompt_tokens: Any = None, output_tokens: Any = None,
                       reset_batch: bool | None = None,
                       **kwargs: Any) -> Any:
        """One decoder token per row of a batch padded to ``max_batch_size``; logits ``[B, 1, V]`` (tokens
        ``[B]`` with ``sampling_params``)."""
        cross_page_table, encoder_lens = as_torch(cross_page_table, torch.int32), as_torch(encoder_lens)

        def build(model: Seq2SeqModel, rows: slice, tokens: torch.Tensor, positions: torch.Tensor,
                  page_table: torch.Tensor) -> HostInputs:
            return model.decoder.decode_inputs(tokens, positions, page_table, cross_page_table[rows],
                                               encoder_lens[rows])

        return self.decode_step(build,
                                lambda model, device_inputs, cache: model.decoder.decode_device(device_inputs, cache),
                                tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=kv_cache,
                                enable_trace=enable_trace, read_from_device=read_from_device,
                                sampling_params=sampling_params, prompt_tokens=prompt_tokens,
                                output_tokens=output_tokens, reset_batch=reset_batch,
                                batch_inputs=(cross_page_table, encoder_lens))
