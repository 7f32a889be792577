"""Mistral 3's text decoder: the Mistral decoder of the Llama family (its sliding window when the config sets one),
with image tokens in prefill.

- Prefill: the prompt's embeddings with the rows of its ``[IMG]`` tokens replaced on the device by the projector's
  tokens (:func:`~tt_models.tt.image_tokens.place_image_rows`); ``[IMG_BREAK]`` and ``[IMG_END]`` keep their text
  embeddings, as in HF. Attention stays causal (images too), so any chunk runs as a text chunk does, given the
  image rows it holds.
- Decode: the Llama family's, unchanged.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from tt_models.models.llama.model import LlamaModel
from tt_models.models.qwen2_5_vl.text import language_model_state, text_config
from tt_models.tt.image_tokens import place_image_rows
from tt_models.tt.lm_head import last_token_logits
from tt_models.tt.model_config import Precision
from tt_models.tt.paged_inputs import PrefillChunk


class Mistral3Text(LlamaModel):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, precision: Precision) -> None:
        """``hf_config``: the Mistral 3 config; ``state``: its weights as HF names them (``model.language_model.*``)."""
        super().__init__(text_config(hf_config), language_model_state(state), device, max_batch_size=max_batch_size,
                         max_seq_len=max_seq_len, optimizations=None, precision=precision)

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                kv_cache: list[list[Any]], on_device: bool = False, *, image_rows: torch.Tensor | None = None,
                image_table: Any = None) -> Any:
        """Positions ``start .. end - 1`` of one user's row; the logits of position ``end - 1`` (host ``[V]``, or the
        device row with ``on_device``). ``image_rows [>= end]``: each position's row of ``image_table``
        ``[1, 1, image tokens, dim]`` (on the device), -1 for text; None: a text-only chunk."""
        if image_rows is None:
            return super().prefill(tokens, start, end, page_table, kv_cache, on_device)
        chunk = PrefillChunk.of(page_table, start, end, kv_cache[0][0].shape[2])
        for x in self.prefill_layers(tokens, chunk, kv_cache, image_rows=image_rows, image_table=image_table):
            pass
        return last_token_logits(x, chunk, self.norm, self.lm_head, self.device, on_device)

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, kv_cache: list[list[Any]], *,
                       image_rows: torch.Tensor | None = None, image_table: Any = None) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the (merged) embeddings and of each layer."""
        x = self.embedding.forward(chunk.padded_tokens(tokens))
        if image_rows is not None:
            rows = image_rows[chunk.start: chunk.end]
            rows = torch.nn.functional.pad(rows, (0, chunk.padded - len(rows)), value=-1)
            if bool((rows >= 0).any()):
                x = place_image_rows(x, rows, image_table, self.device)
        yield x
        yield from self.decoder_layers(x, self.rope.prefill(chunk.start, chunk.padded), chunk, kv_cache)
