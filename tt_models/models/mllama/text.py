"""Mllama's text model in TT-NN: Llama decoder layers, with gated cross-attention layers over the vision tokens.

The vision tokens of a request are projected to K/V once per cross-attention layer at prefill and written with
``paged_fill_cache`` into its cross blocks; every read goes through ``cross_page_table`` (see ``masks.py`` for
which prefix of them each text row attends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator

import torch

from tt_models.models.mllama.masks import CrossAttentionMask
from tt_models.runtime import ttnn
from tt_models.tt.cross_attention import CrossAttention, cross_inputs
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.decode_inputs import HostInputs, advanced_positions, tracked_ints, tracked_tensor
from tt_models.tt.decoder import TransformerBlock
from tt_models.tt.embedding import Embedding
from tt_models.tt.lm_head import LMHead, last_token_logits
from tt_models.tt.mlp import MLP
from tt_models.tt.model_config import DecoderArgs, Precision
from tt_models.tt.norm import RMSNorm
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.rope import RotarySetup, RotaryTable, rotary_index
from tt_models.tt.tensor_parallel import HeadSplit, check_splits, chips
from tt_models.tt.weights import as_int_tensor, as_tensor

PREFIX = "model.language_model."


def text_precision(optimizations: str | None) -> Precision:
    """The Llama family's profiles, with the MLP weights in bfloat8_b in both: bfloat4_b MLPs (Llama's
    "performance") drop the tiny test model's prefill logits PCC against HF to 0.58-0.96, bfloat8_b keeps it
    >= 0.995 (measured on the host backend)."""
    return replace(Precision.for_profile(optimizations), mlp_weights=ttnn.bfloat8_b)


@dataclass
class CrossRows:
    """The cross-attention inputs of one forward's rows, on the device."""

    tables: list[Any]  # per 32 rows: cross page tables
    last: list[Any]  # per 32 rows: last attended vision token (-1: none)
    attends: Any  # [1, 1, R, 1]: 1 where the row reads vision tokens
    text_rows: Any  # [1, 1, R, 1]: HF's full_text_row_masked_out_mask

    @classmethod
    def of(cls, tables: torch.Tensor, visible: torch.Tensor, text_rows: torch.Tensor, device: Any) -> "CrossRows":
        """``tables [R, W]``, the vision tokens each row attends ``[R]`` (0: none) and the text-row mask ``[R]``."""
        tables_dev, last = cross_inputs(tables, visible - 1, device)
        return cls(tables_dev, last, _row_values(visible > 0, device), _row_values(text_rows, device))


def _row_values(values: torch.Tensor, device: Any) -> Any:
    """One value per row as ``[1, 1, R, 1]``, broadcast over the hidden dim."""
    return as_tensor(values.float().reshape(1, 1, -1, 1), device)


class CrossAttentionBlock:
    """HF's ``MllamaCrossAttentionDecoderLayer``: ``h = x + tanh(g_attn) * xattn(norm(x))``,
    ``out = h + tanh(g_mlp) * text_rows * mlp(norm(h))``. It has no self-attention and no self KV."""

    def __init__(self, args: DecoderArgs, state: dict[str, torch.Tensor], prefix: str, device: Any,
                 precision: Precision, decode: DecodeConfigs) -> None:
        self.decode = decode
        self.attention_norm = RMSNorm(state[f"{prefix}input_layernorm.weight"], args.norm_eps, device)
        self.attention = CrossAttention(args, state, f"{prefix}cross_attn.", device, precision.attention_weights,
                                        decode, out_proj="o_proj", qk_norm_eps=args.norm_eps)
        self.attn_gate = math.tanh(float(state[f"{prefix}cross_attn_attn_gate"]))
        self.ffn_norm = RMSNorm(state[f"{prefix}post_attention_layernorm.weight"], args.norm_eps, device)
        self.feed_forward = MLP(state, f"{prefix}mlp.", device, precision.mlp_weights, decode)
        self.mlp_gate = math.tanh(float(state[f"{prefix}cross_attn_mlp_gate"]))

    def forward(self, x: Any, kv_cache: tuple[Any, Any], rows: CrossRows) -> Any:
        normed = self.attention_norm.forward(x)
        attn = self.attention.forward(normed, kv_cache, rows.tables, rows.last)
        ttnn.deallocate(normed)
        return self._gated(x, attn, rows, lambda h: self.feed_forward.forward(self.ffn_norm.forward(h)),
                           ttnn.DRAM_MEMORY_CONFIG)

    def forward_decode(self, x: Any, kv_cache: tuple[Any, Any], rows: CrossRows) -> Any:
        """``x``: the residual in ``decode.residual``; returns the next one there."""
        decode = self.decode
        normed = self.attention_norm.forward(x, decode.attention_norm)
        attn = self.attention.forward_decode(normed, kv_cache, rows.tables[0], rows.last[0])
        ttnn.deallocate(normed)
        return self._gated(x, reshard(attn, decode.residual), rows,
                           lambda h: self.feed_forward.forward_decode(self.ffn_norm.forward(h, decode.mlp_norm)),
                           decode.residual)

    def _gated(self, x: Any, attn: Any, rows: CrossRows, mlp: Any, residual: Any) -> Any:
        # The SDPA leaves the rows it skips (cur_pos -1) unwritten: select zeros there rather than multiply.
        attn = ttnn.where(rows.attends, ttnn.multiply(attn, self.attn_gate), 0.0)
        h = ttnn.add(x, attn, memory_config=residual)
        ttnn.deallocate(attn)
        ff = reshard(mlp(h), residual)
        ff = ttnn.multiply(ttnn.multiply(ff, rows.text_rows), self.mlp_gate)
        out = ttnn.add(h, ff, memory_config=residual)
        ttnn.deallocate(h)
        ttnn.deallocate(ff)
        return out


class MllamaText:
    def __init__(self, text_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.args = args = DecoderArgs.from_hf(text_config, max_batch_size=max_batch_size, max_seq_len=max_seq_len)
        self.heads = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        check_splits(device, hidden_size=args.dim, intermediate_size=args.hidden_dim)
        self.precision = precision = text_precision(optimizations)
        self.decode = decode = DecodeConfigs.sharded(device, dim=args.dim, hidden_dim=args.hidden_dim,
                                                     n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                                                     head_dim=args.head_dim)
        self.embedding = Embedding(state[f"{PREFIX}embed_tokens.weight"], device)
        self.rope = RotarySetup(text_config, args.head_dim, device, args.decode_rows)
        self.rotary_table = RotaryTable(self.rope, args.max_seq_len)
        cross = set(text_config.cross_attention_layers)
        self.layers = [CrossAttentionBlock(args, state, f"{PREFIX}layers.{i}.", device, precision, decode)
                       if i in cross else
                       TransformerBlock(args, state, i, device, precision, decode, layers_prefix=f"{PREFIX}layers.")
                       for i in range(args.n_layers)]
        self.n_layers = args.n_layers
        self.norm = RMSNorm(state[f"{PREFIX}norm.weight"], args.norm_eps, device)
        self.lm_head = LMHead(state["lm_head.weight"], device, precision.lm_head_weights, decode)

    def fill_cross(self, vision_tokens: Any, cross_row: torch.Tensor, kv_cache: list[list[Any]]) -> None:
        """Write one request's cross K/V (``vision_tokens [1, 1, S, dim]``) into its cross blocks, every
        cross-attention layer."""
        block_size = kv_cache[0][0].shape[2]
        table = as_int_tensor(cross_row[None, : -(-vision_tokens.shape[2] // block_size)], self.device)
        for layer, cache in zip(self.layers, kv_cache):
            if isinstance(layer, CrossAttentionBlock):
                layer.attention.fill(vision_tokens, cache, table)

    def _layers(self, x: Any, kv_cache: list[list[Any]], cross: CrossRows | None,
                **attention_kwargs: Any) -> Iterator[Any]:
        for layer, cache in zip(self.layers, kv_cache):
            if isinstance(layer, CrossAttentionBlock):
                if cross is None:  # no row reads vision tokens: HF skips these layers
                    pass
                elif "current_pos" in attention_kwargs:
                    x = layer.forward_decode(x, cache, cross)
                else:
                    x = layer.forward(x, cache, cross)
            elif "current_pos" in attention_kwargs:
                x = layer.forward_decode(x, cache, **attention_kwargs)
            else:
                x = layer.forward_prefill(x, cache, **attention_kwargs)
            yield x

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor, cross_row: torch.Tensor,
                mask: CrossAttentionMask | None, kv_cache: list[list[Any]], on_device: bool = False) -> Any:
        """Positions ``start .. end - 1`` of one request (its vision K/V, if any, already in its cross blocks);
        the logits of position ``end - 1`` (left on the device, ``[1, 1, 1, V]``, with ``on_device``)."""
        chunk = PrefillChunk.of(page_table, start, end, kv_cache[0][0].shape[2])
        for x in self.prefill_layers(tokens, chunk, cross_row, mask, kv_cache):
            pass
        return last_token_logits(x, chunk, self.norm, self.lm_head, self.device, on_device)

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, cross_row: torch.Tensor,
                       mask: CrossAttentionMask | None, kv_cache: list[list[Any]]) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the embedding and of each layer."""
        x = self.embedding.forward(chunk.padded_tokens(tokens))
        yield x
        cross = None
        if mask is not None:
            positions = torch.arange(chunk.start, chunk.start + chunk.padded)
            cross = CrossRows.of(cross_row[None].expand(chunk.padded, -1), mask.visible(positions),
                                 mask.text_rows(positions), self.device)
        yield from self._layers(x, kv_cache, cross, rot=self.rope.prefill(chunk.start, chunk.padded),
                                trans_mat=self.rope.trans_mat_prefill,
                                page_table=as_int_tensor(chunk.read_blocks[None], self.device),
                                fill_page_table=as_int_tensor(chunk.fill_blocks[None], self.device),
                                chunk_start=chunk.start)

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    def decode_inputs(self, tokens: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor,
                      cross_page_table: torch.Tensor, visible: torch.Tensor, text_rows: torch.Tensor) -> HostInputs:
        """The host inputs of :meth:`decode_device` for one token per user (``positions`` ``-1``: a padding row),
        each attending its first ``visible`` vision tokens (0: none), padded to 32 rows. A row's cross inputs are
        its request's (constant while the batch is), so a trace copies them only when the batch changed."""
        pad = self.args.decode_rows - tokens.shape[0]
        positions = torch.nn.functional.pad(positions, (0, pad), value=-1)
        visible = torch.where(positions >= 0, torch.nn.functional.pad(visible, (0, pad)), 0)
        rows = torch.nn.functional.pad(text_rows, (0, pad)).float()
        return {"tokens": Embedding.host_ids(torch.nn.functional.pad(tokens, (0, pad)), self.device),
                "current_pos": tracked_ints(positions, self.device, advance=advanced_positions),
                "rot_idx": rotary_index(positions, positions, self.device),
                "page_table": tracked_ints(torch.nn.functional.pad(page_table, (0, 0, 0, pad)), self.device),
                "cross_page_table": tracked_ints(torch.nn.functional.pad(cross_page_table, (0, 0, 0, pad)),
                                                self.device),
                "cross_last": tracked_ints(visible - 1, self.device),
                "cross_attends": tracked_tensor((visible > 0).float().reshape(1, 1, -1, 1), self.device),
                "text_rows": tracked_tensor(rows.reshape(1, 1, -1, 1), self.device)}

    def decode_device(self, inputs: dict[str, Any], kv_cache: list[list[Any]]) -> Any:
        """Device ops only (traceable): device logits ``[1, 1, 32, V]``. The cross layers always run (a trace
        cannot skip them when no row attends vision tokens); rows that attend none add exact zeros there. The step
        then advances its positions and rotary indices by one on the device, as the next step's are unless the batch
        changed (a replayed trace's inputs need no copy then: :mod:`tt_models.tt.decode_trace`)."""
        cross = CrossRows([inputs["cross_page_table"]], [inputs["cross_last"]], inputs["cross_attends"],
                          inputs["text_rows"])
        x = reshard(self.embedding.forward_ids(inputs["tokens"]), self.decode.residual)
        for x in self._layers(x, kv_cache, cross, rot=self.rotary_table.decode_rows(inputs["rot_idx"]),
                              trans_mat=self.rope.trans_mat_decode, page_table=inputs["page_table"],
                              current_pos=inputs["current_pos"]):
            pass
        logits = self.lm_head.forward(self.norm.forward(x, self.decode.lm_head_norm))
        ttnn.plus_one(inputs["current_pos"], skip_negative_entries=True)
        ttnn.plus_one(inputs["rot_idx"])
        return logits
