"""One replica of a Llama-family model on one device or a tensor-parallel mesh: embedding, decoder blocks, norm, LM
head.

With sliding-window layers (``sliding_window``; GPT-OSS's alternating ``layer_types``) its layers form KV-cache groups
(:class:`~tt_models.tt.kv_cache.KVCacheGroups`, ``kv_groups``): given a page table per group, each layer reads and
writes its group's (inputs ``page_table``, ``page_table_1``, ...); without, every layer uses ``page_table``."""

from __future__ import annotations

from typing import Any, Iterator

import torch

from tt_models.runtime import ttnn
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.decode_inputs import HostInputs, advanced_positions, host_ints, to_device, tracked_ints
from tt_models.tt.decoder import TransformerBlock
from tt_models.tt.embedding import Embedding
from tt_models.tt.hidden_padding import HiddenPadding
from tt_models.tt.kv_cache import KVCacheGroups, layer_tables, table_key
from tt_models.tt.lm_head import LMHead, last_row_logits, last_tile_logits
from tt_models.tt.model_config import DecoderArgs, Precision
from tt_models.tt.norm import RMSNorm
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.rope import RotarySetup, RotaryTable, rotary_index
from tt_models.tt.tensor_parallel import TILE, HeadSplit, check_splits, chips
from tt_models.tt.weights import as_int_tensor


class LlamaModel:
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None, sharded_decode: bool = True,
                 precision: Precision | None = None, pad_hidden: bool = False) -> None:
        """``sharded_decode``: tt_transformers' DRAM-sharded decode layouts (else all interleaved, as a reference);
        ``precision``: a family's own weight dtypes instead of the profile's; ``pad_hidden``: zero-pad a hidden size
        that does not split over the chips (:mod:`~tt_models.tt.hidden_padding`; else it is refused). Image+text
        subclasses place image tokens of the real width in the residual, so they do not pad."""
        self.device = device
        args = DecoderArgs.from_hf(hf_config, max_batch_size=max_batch_size, max_seq_len=max_seq_len)
        padding = HiddenPadding.of(args.dim, chips(device)) if pad_hidden else None
        if padding is not None:
            args, state = padding.args(args), padding.state(state)
        self.args = args
        self.heads = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        dense_width = _dense_mlp_width(args, chips(device))
        check_splits(device, hidden_size=args.dim, intermediate_size=dense_width)
        self.precision = precision = precision or Precision.for_model(hf_config, optimizations)
        self.decode = decode = (DecodeConfigs.sharded(device, dim=args.dim, hidden_dim=dense_width,
                                                      n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                                                      head_dim=args.head_dim)
                                if sharded_decode else DecodeConfigs.interleaved())
        self.embedding = Embedding(state["model.embed_tokens.weight"], device)
        self.rope = RotarySetup(hf_config, args.head_dim, device, args.decode_rows)
        self.rotary_table = RotaryTable(self.rope, args.max_seq_len)
        self.layers = [TransformerBlock(args, state, i, device, precision, decode) for i in range(args.n_layers)]
        self.n_layers = args.n_layers
        groups = KVCacheGroups.of([args.window(i) for i in range(args.n_layers)])
        self.kv_groups = groups if groups.is_hybrid else None
        self.norm = RMSNorm(state["model.norm.weight"], args.residual_norm_eps, device)
        lm_head = state["model.embed_tokens.weight"] if args.tie_word_embeddings else state["lm_head.weight"]
        self.lm_head = LMHead(lm_head, device, precision.lm_head_weights, decode)

    @property
    def kv_geometry(self) -> tuple[int, int]:
        """``(KV heads, head_dim)`` of one chip's KV pools."""
        return self.heads.kv_per_chip, self.args.head_dim

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                kv_cache: list[list[Any]], on_device: bool = False) -> Any:
        """Run positions ``start .. end - 1`` of one user's token row eagerly; return the logits of position
        ``end - 1`` (host ``[V]``, or with ``on_device`` the device row ``[1, 1, 1, V]``)."""
        chunk = self.prefill_chunk(page_table, start, end, kv_cache)
        logits = self.prefill_device(to_device(self.prefill_inputs(tokens, chunk), self.device), chunk, kv_cache,
                                     on_device)
        return last_row_logits(logits, chunk, self.lm_head, self.device, on_device)

    @staticmethod
    def prefill_chunk(page_table: torch.Tensor, start: int, end: int, kv_cache: list[list[Any]]) -> PrefillChunk:
        """Positions ``start .. end - 1`` of one user's block row ``page_table`` (entries past ``ceil(end / bs)``
        may be stale: never used)."""
        return PrefillChunk.of(page_table, start, end, kv_cache[0][0].shape[2])

    def prefill_inputs(self, tokens: torch.Tensor, chunk: PrefillChunk,
                       group_chunks: list[PrefillChunk] | None = None) -> HostInputs:
        """The host inputs of :meth:`prefill_device`: the chunk's tile-padded tokens, cos/sin and page tables (with
        ``group_chunks``, the chunk in each KV-cache group's table, ``chunk`` group 0's: each group's tables)."""
        tables = {}
        for group, group_chunk in enumerate(group_chunks or [chunk]):
            tables[f"fill_{table_key(group)}"] = host_ints(group_chunk.fill_blocks[None], self.device)
            tables[table_key(group)] = host_ints(group_chunk.read_blocks[None], self.device)
        return {"tokens": Embedding.host_ids(chunk.padded_tokens(tokens), self.device), **tables,
                **self.rope.prefill_inputs(chunk.start, chunk.padded)}

    def prefill_device(self, inputs: dict[str, Any], chunk: PrefillChunk, kv_cache: list[list[Any]],
                       on_device: bool = False) -> Any:
        """Device ops only: the logits tile of :func:`~tt_models.tt.lm_head.last_tile_logits`. Traceable for the
        chunks of one padded length starting at 0 (``chunk.start`` and the last tile are baked into the ops)."""
        x = self.embedding.forward_ids(inputs["tokens"])
        tables = {name: t for name, t in inputs.items() if "page_table" in name}
        for x in self.layers_over(x, (inputs["cos"], inputs["sin"]), tables, chunk.start, kv_cache):
            pass
        return last_tile_logits(x, chunk, self.norm, self.lm_head, self.device, on_device)

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, kv_cache: list[list[Any]]) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the embedding and of each layer."""
        x = self.embedding.forward(chunk.padded_tokens(tokens))
        yield x
        yield from self.decoder_layers(x, self.rope.prefill(chunk.start, chunk.padded), chunk, kv_cache)

    def decoder_layers(self, x: Any, rot: tuple[Any, Any], chunk: PrefillChunk,
                       kv_cache: list[list[Any]]) -> Iterator[Any]:
        """Each layer's output ``[1, 1, chunk.padded, dim]`` for the chunk's embeddings ``x`` rotated by ``rot``."""
        tables = {"fill_page_table": as_int_tensor(chunk.fill_blocks[None], self.device),
                  "page_table": as_int_tensor(chunk.read_blocks[None], self.device)}
        yield from self.layers_over(x, rot, tables, chunk.start, kv_cache)

    def layers_over(self, x: Any, rot: tuple[Any, Any], tables: dict[str, Any], chunk_start: int,
                    kv_cache: list[list[Any]]) -> Iterator[Any]:
        """Each layer's output for embeddings ``x`` at positions ``chunk_start ..`` with the device page tables
        ``tables`` (``page_table``, ``fill_page_table``; and each KV-cache group's beyond the first, if any)."""
        reads = layer_tables(tables, self.kv_groups, self.n_layers)
        fills = layer_tables(tables, self.kv_groups, self.n_layers, prefix="fill_")
        for layer, cache, read, fill in zip(self.layers, kv_cache, reads, fills):
            x = layer.forward_prefill(x, cache, rot=rot, trans_mat=self.rope.trans_mat_prefill,
                                      chunk_start=chunk_start, page_table=read, fill_page_table=fill)
            yield x

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    def decode_inputs(self, tokens: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor,
                      rope_positions: torch.Tensor | None = None) -> HostInputs:
        """The host inputs of :meth:`decode_device` for one token per user (``positions`` ``-1``: a padding row,
        neither written nor attended), padded to 32 rows. ``rope_positions``: the rotary positions when they are not
        the cache positions (M-RoPE's position + delta)."""
        pad = self.args.decode_rows - tokens.shape[0]
        positions = torch.nn.functional.pad(positions, (0, pad), value=-1)
        rope_positions = positions if rope_positions is None else torch.nn.functional.pad(rope_positions, (0, pad))
        return {"tokens": Embedding.host_ids(torch.nn.functional.pad(tokens, (0, pad)), self.device),
                "current_pos": tracked_ints(positions, self.device, advance=advanced_positions),
                "page_table": tracked_ints(torch.nn.functional.pad(page_table, (0, 0, 0, pad)), self.device),
                "rot_idx": rotary_index(rope_positions, positions, self.device)}

    def decode_device(self, inputs: dict[str, Any], kv_cache: list[list[Any]]) -> Any:
        """Device ops only (traceable): logits ``[1, 1, 32, V]`` whose first rows are the users'. The step then
        advances its positions by one on the device, as the next step's are unless the batch changed (a replayed
        trace's inputs need no copy then: :mod:`tt_models.tt.decode_trace`)."""
        x = reshard(self.embedding.forward_ids(inputs["tokens"]), self.decode.residual)
        rot = self.rotary_table.decode_rows(inputs["rot_idx"])
        tables = layer_tables(inputs, self.kv_groups, self.n_layers)  # each layer's group's (Generator.decode_step)
        for layer, cache, table in zip(self.layers, kv_cache, tables):
            x = layer.forward_decode(x, cache, rot=rot, trans_mat=self.rope.trans_mat_decode, page_table=table,
                                     current_pos=inputs["current_pos"])
        logits = self.lm_head.forward(self.norm.forward(x, self.decode.lm_head_norm))
        ttnn.plus_one(inputs["current_pos"], skip_negative_entries=True)
        ttnn.plus_one(inputs["rot_idx"])
        return logits


def _dense_mlp_width(args: DecoderArgs, n_chips: int) -> int:
    """The width the decode layouts give the dense MLP: ``intermediate_size``; but a model with experts in every layer
    (GPT-OSS) has no dense MLP, and when its ``intermediate_size`` does not split over the chips (120B's 2880 over 8)
    the (unused) MLP layouts are sized as ``dim`` wide, so that the MLP norm's grid, the one they give, splits."""
    all_experts = args.experts is not None and len(args.experts.sparse_layers) == args.n_layers
    return args.dim if all_experts and args.hidden_dim % (n_chips * TILE) else args.hidden_dim
