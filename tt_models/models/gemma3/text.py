"""Gemma 3's text decoder in TT-NN: interleaved sliding-window and global layers over one paged KV pool per layer.

- Embeddings scaled by ``sqrt(hidden_size)`` (the table is stored scaled; the LM head keeps the unscaled one).
  In prefill the rows of image tokens are replaced by the image embeddings (not scaled, as in HF).
- Each layer type rotates with its own table: ``rope_parameters["sliding_attention"]`` (``rope_local_base_freq``)
  and ``rope_parameters["full_attention"]`` (``rope_theta`` and its scaling).
- Sliding layers attend the last ``sliding_window`` keys: decode through the SDPA decode op's
  ``sliding_window_size``, text-only prefill through the causal SDPA's; a first chunk holding images through the
  masks of :mod:`masks` (bidirectional within each image). Given one page table per KV-cache group
  (``group_tables``; :class:`~tt_models.tt.kv_cache.KVCacheGroups`), each layer reads and writes its group's, so a
  sliding group's table need hold only the window's blocks (the others out of every read); without, every layer
  reads and writes the one ``page_table``.
- The final logits are soft-capped, ``cap * tanh(logits / cap)``, on the device (device sampling reads them).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from tt_models.models.gemma3.decoder import SLIDING, Gemma3Block, gemma_norm
from tt_models.models.gemma3.masks import prefill_mask
from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.decode_inputs import HostInputs, advanced_positions, tracked_ints
from tt_models.tt.embedding import Embedding
from tt_models.tt.image_tokens import place_image_rows
from tt_models.tt.kv_cache import KVCacheGroups, layer_tables, table_key
from tt_models.tt.lm_head import LMHead, last_token_logits
from tt_models.tt.model_config import DecoderArgs, Precision
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.rope import RotarySetup, RotaryTable, rotary_index
from tt_models.tt.tensor_parallel import HeadSplit, check_splits, chips
from tt_models.tt.weights import as_int_tensor, as_tensor

HF_PREFIX = "model.language_model."


def language_model_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The image model's text weights as a text-only checkpoint names them: ``model.*`` (and the LM head: the
    embedding table when tied)."""
    out = {f"model.{name[len(HF_PREFIX):]}": t for name, t in state.items() if name.startswith(HF_PREFIX)}
    if "lm_head.weight" in state:
        out["lm_head.weight"] = state["lm_head.weight"]
    return text_state(out)


def text_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A text-only checkpoint's weights with the LM head (the embedding table when tied)."""
    return {"lm_head.weight": state["model.embed_tokens.weight"], **state}


def layer_windows(text_config: Any) -> list[int | None]:
    """Each layer's attention window: ``sliding_window`` on sliding layers, None (every key) on the global ones."""
    return [text_config.sliding_window if kind == SLIDING else None for kind in text_config.layer_types]


def rope_config(text_config: Any, layer_type: str) -> Any:
    """The text config with one layer type's ``rope_parameters``, as the shared rotary setup reads them."""
    config = copy.copy(text_config)
    config.rope_parameters = dict(text_config.rope_parameters[layer_type])
    return config


class SoftcappedLMHead:
    """The LM head followed by ``cap * tanh(logits / cap)`` (Gemma's ``final_logit_softcapping``; none: as is)."""

    def __init__(self, head: LMHead, cap: float | None) -> None:
        self.head, self.cap = head, cap
        self.vocab_size = head.vocab_size

    def forward(self, x: Any) -> Any:
        logits = self.head.forward(x)
        if self.cap is None:
            return logits
        scaled = ttnn.multiply(logits, 1.0 / self.cap)
        ttnn.deallocate(logits)
        capped = ttnn.tanh(scaled)
        ttnn.deallocate(scaled)
        out = ttnn.multiply(capped, self.cap)
        ttnn.deallocate(capped)
        return out


class Gemma3Text:
    def __init__(self, text_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, precision: Precision, sharded_decode: bool = True) -> None:
        """``state``: the text weights as a text-only checkpoint names them (``model.*``, ``lm_head.weight``: see
        :func:`language_model_state`); ``precision``: the family's profile."""
        if text_config.attn_logit_softcapping is not None:
            raise ValueError("attn_logit_softcapping is not supported: TT-NN's SDPA has no logit soft-capping "
                             "(Gemma 3 checkpoints leave it unset)")
        self.device = device
        self.args = args = DecoderArgs.from_hf(text_config, max_batch_size=max_batch_size, max_seq_len=max_seq_len)
        self.layer_types = list(text_config.layer_types)
        self.heads = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        check_splits(device, hidden_size=args.dim, intermediate_size=args.hidden_dim)
        self.precision = precision
        self.decode = decode = (DecodeConfigs.sharded(device, dim=args.dim, hidden_dim=args.hidden_dim,
                                                      n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                                                      head_dim=args.head_dim)
                                if sharded_decode else DecodeConfigs.interleaved())
        table = state["model.embed_tokens.weight"]
        self.embedding = Embedding(table * args.dim ** 0.5, device)
        self.rope = {kind: RotarySetup(rope_config(text_config, kind), args.head_dim, device, args.decode_rows)
                     for kind in sorted(set(self.layer_types))}
        self.rotary_tables = {kind: RotaryTable(rope, args.max_seq_len) for kind, rope in self.rope.items()}
        self.layers = [Gemma3Block(args, state, i, kind, device, precision, decode, text_config.query_pre_attn_scalar)
                       for i, kind in enumerate(self.layer_types)]
        self.n_layers = args.n_layers
        self.kv_groups = KVCacheGroups.of(layer_windows(text_config))
        self.norm = gemma_norm(state["model.norm.weight"], args.norm_eps, device)
        self.lm_head = SoftcappedLMHead(LMHead(state["lm_head.weight"], device, precision.lm_head_weights, decode),
                                        text_config.final_logit_softcapping)

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    @property
    def kv_geometry(self) -> tuple[int, int]:
        return self.heads.kv_per_chip, self.args.head_dim

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                kv_cache: list[list[Any]], on_device: bool = False, *, image_rows: torch.Tensor | None = None,
                image_table: Any = None, group_tables: list[torch.Tensor] | None = None) -> Any:
        """Positions ``start .. end - 1`` of one user's row; the logits of position ``end - 1`` (host ``[V]``, or
        the device row with ``on_device``). ``image_rows [>= end]``: each position's row of ``image_table``
        ``[1, 1, image tokens, dim]``, -1 for text; only a first chunk (``start`` in the first block) may hold
        image tokens (a later chunk cannot attend an image both ways). ``group_tables``: the row's table of each
        KV-cache group (group 0's in place of ``page_table``)."""
        tables = [page_table] if group_tables is None else group_tables
        chunks = [PrefillChunk.of(table, start, end, kv_cache[0][0].shape[2]) for table in tables]
        chunk = chunks[0]  # (the groups' chunks differ in their blocks only)
        ids = chunk.padded_tokens(tokens)
        rows = None if image_rows is None else image_rows[chunk.start: chunk.end]
        if rows is None or not bool((rows >= 0).any()):
            x, masks = self.embedding.forward(ids), {}
        else:
            if chunk.start:
                raise ValueError(f"a prefill chunk from position {chunk.start} holds image tokens: Gemma 3's images "
                                 f"attend themselves both ways, so they must be in the prompt's first chunk")
            padded = torch.nn.functional.pad(rows, (0, chunk.padded - len(rows)), value=-1)
            ids[padded >= 0] = 0  # the image token may lie past the table (HF embeds id 0 there too); replaced below
            x = place_image_rows(self.embedding.forward(ids), padded, image_table, self.device)
            masks = {kind: as_tensor(prefill_mask(rows >= 0, chunk.padded,
                                                  self.args.sliding_window if kind == SLIDING else None), self.device)
                     for kind in self.rope}
        rot = {kind: rope.prefill(chunk.start, chunk.padded) for kind, rope in self.rope.items()}
        device_tables = {}
        for group, group_chunk in enumerate(chunks):
            device_tables[table_key(group)] = as_int_tensor(group_chunk.read_blocks[None], self.device)
            device_tables[f"fill_{table_key(group)}"] = as_int_tensor(group_chunk.fill_blocks[None], self.device)
        sdpa_tables = layer_tables(device_tables, self.kv_groups, self.n_layers)
        fill_tables = layer_tables(device_tables, self.kv_groups, self.n_layers, prefix="fill_")
        for layer, kind, cache, sdpa_table, fill_table in zip(self.layers, self.layer_types, kv_cache, sdpa_tables,
                                                              fill_tables):
            out = layer.forward_prefill(x, cache, rot=rot[kind], trans_mat=self.rope[kind].trans_mat_prefill,
                                        page_table=sdpa_table, fill_page_table=fill_table, chunk_start=chunk.start,
                                        attn_mask=masks.get(kind))
            ttnn.deallocate(x)
            x = out
        for t in (*device_tables.values(), *masks.values(), *(t for pair in rot.values() for t in pair)):
            ttnn.deallocate(t)
        return last_token_logits(x, chunk, self.norm, self.lm_head, self.device, on_device)

    def decode_inputs(self, tokens: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor) -> HostInputs:
        """The host inputs of :meth:`decode_device` for one token per user (``positions`` ``-1``: a padding row),
        padded to 32 rows: one rotary index for every layer type's table."""
        pad = self.args.decode_rows - tokens.shape[0]
        positions = torch.nn.functional.pad(positions, (0, pad), value=-1)
        return {"tokens": Embedding.host_ids(torch.nn.functional.pad(tokens, (0, pad)), self.device),
                "current_pos": tracked_ints(positions, self.device, advance=advanced_positions),
                "rot_idx": rotary_index(positions, positions, self.device),
                "page_table": tracked_ints(torch.nn.functional.pad(page_table, (0, 0, 0, pad)), self.device)}

    def decode_device(self, inputs: dict[str, Any], kv_cache: list[list[Any]]) -> Any:
        """Device ops only (traceable): logits ``[1, 1, 32, V]`` whose first rows are the users'. The step then
        advances its positions and rotary index by one on the device, as the next step's are unless the batch changed
        (a replayed trace's inputs need no copy then: :mod:`tt_models.tt.decode_trace`)."""
        x = reshard(self.embedding.forward_ids(inputs["tokens"]), self.decode.residual)
        rot = {kind: table.decode_rows(inputs["rot_idx"]) for kind, table in self.rotary_tables.items()}
        tables = layer_tables(inputs, self.kv_groups, self.n_layers)  # each layer's group's (Generator.decode_step)
        for layer, kind, cache, table in zip(self.layers, self.layer_types, kv_cache, tables):
            out = layer.forward_decode(x, cache, rot=rot[kind], trans_mat=self.rope[kind].trans_mat_decode,
                                       page_table=table, current_pos=inputs["current_pos"])
            ttnn.deallocate(x)
            x = out
        logits = self.lm_head.forward(self.norm.forward(x, self.decode.lm_head_norm))
        ttnn.plus_one(inputs["current_pos"], skip_negative_entries=True)
        ttnn.plus_one(inputs["rot_idx"])
        return logits
