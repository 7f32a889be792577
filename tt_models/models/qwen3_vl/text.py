"""Qwen3-VL's text decoder: the Qwen3 decoder of the Llama family (per-head Q/K norms), with image tokens, DeepStack
and interleaved M-RoPE in prefill; decode as Qwen2.5-VL's (:mod:`tt_models.models.qwen2_5_vl.text`).

- Interleaved M-RoPE (``mrope_interleaved``, HF's ``recomposition_frequencies``): rotary frequency ``k`` turns with
  the height position when ``k % 3 == 1`` and ``k < 3 * mrope_section[1]``, with the width position when
  ``k % 3 == 2`` and ``k < 3 * mrope_section[2]``, else with the temporal one, where Qwen2.5-VL gives each axis one
  contiguous run.
- DeepStack: the image table holds the merger's tokens and then each DeepStack merger's side by side
  (:meth:`~tt_models.models.qwen3_vl.model.Qwen3VLModel.image_tokens`); the first are placed at the image tokens' rows
  of the embeddings, the ``i``-th DeepStack features are added to those rows of text layer ``i``'s output.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from tt_models.models.qwen2_5_vl.text import Qwen2_5_VLText, chunk_image_rows
from tt_models.runtime import ttnn
from tt_models.tt.image_tokens import add_image_rows, place_image_rows
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.weights import as_int_tensor


def interleaved_axes(section: list[int]) -> torch.Tensor:
    """The axis (0 temporal, 1 height, 2 width) each of the ``sum(section)`` rotary frequencies turns with."""
    axes = torch.zeros(sum(section), dtype=torch.int64)
    for axis in (1, 2):
        axes[axis: 3 * section[axis]: 3] = axis
    return axes


class Qwen3VLText(Qwen2_5_VLText):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        super().__init__(hf_config, state, device, max_batch_size=max_batch_size, max_seq_len=max_seq_len,
                         optimizations=optimizations)
        # Interleaved whatever ``mrope_interleaved`` says: HF's Qwen3-VL rotary reads only ``mrope_section``.
        self.frequency_axis = interleaved_axes(list(hf_config.text_config.rope_parameters["mrope_section"]))
        self.deepstack_layers = len(hf_config.vision_config.deepstack_visual_indexes)
        if self.deepstack_layers > self.n_layers:
            raise ValueError(f"{self.deepstack_layers} DeepStack layers but {self.n_layers} text layers")

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, kv_cache: list[list[Any]], *,
                       positions: torch.Tensor | None = None, image_rows: torch.Tensor | None = None,
                       image_table: Any = None) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the (merged) embeddings and of each layer (DeepStack's
        features added). ``image_table [1, 1, image tokens, (1 + DeepStack layers) * dim]``."""
        x = self.embedding.forward(chunk.padded_tokens(tokens))
        rows = chunk_image_rows(chunk, image_rows)
        tables = [] if rows is None else self._split(image_table)
        if rows is not None:
            x = place_image_rows(x, rows, tables[0], self.device)
        yield x
        rot = self.prefill_rotation(chunk, positions)
        pages = {"fill_page_table": as_int_tensor(chunk.fill_blocks[None], self.device),
                 "page_table": as_int_tensor(chunk.read_blocks[None], self.device)}
        for i, (layer, cache) in enumerate(zip(self.layers, kv_cache)):
            x = layer.forward_prefill(x, cache, rot=rot, trans_mat=self.rope.trans_mat_prefill,
                                      chunk_start=chunk.start, **pages)
            if i + 1 < len(tables):
                x = add_image_rows(x, rows, tables[i + 1], self.device)
            yield x
        for table in tables:
            ttnn.deallocate(table)

    def _split(self, image_table: Any) -> list[Any]:
        """The merger's tokens and each DeepStack merger's, ``[1, 1, image tokens, dim]`` each."""
        dim, n = self.args.dim, image_table.shape[2]
        if image_table.shape[-1] != (1 + self.deepstack_layers) * dim:
            raise ValueError(f"image table width {image_table.shape[-1]}: expected "
                             f"(1 + {self.deepstack_layers}) * {dim}")
        return [ttnn.slice(image_table, [0, 0, 0, i * dim], [1, 1, n, (i + 1) * dim])
                for i in range(1 + self.deepstack_layers)]
