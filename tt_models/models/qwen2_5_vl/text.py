"""Qwen2.5-VL's text decoder: the Qwen2 decoder of the Llama family, with image tokens and M-RoPE in prefill.

- Prefill: the prompt's embeddings, with the rows of its image tokens replaced on the device by the vision tower's
  tokens (gathered with ``ttnn.embedding`` from the request's image table, then selected per row by exact 0/1
  masks), rotated by cos/sin built on the host from the 3-D positions (:mod:`rope_index`): frequency ``k`` of
  each head turns with the temporal, height or width position as ``mrope_section`` assigns it.
- Decode: one position per user; past the images all three axes are equal, so the ordinary 1-D rotary table at
  ``position + delta`` is HF's rotation (the cache is still written at ``position``).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Iterator

import torch

from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import ttnn
from tt_models.tt.decode_inputs import HostInputs
from tt_models.tt.image_tokens import place_image_rows
from tt_models.tt.lm_head import last_token_logits
from tt_models.tt.model_config import Precision
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.weights import as_tensor

HF_PREFIX = "model.language_model."


def language_model_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The text weights under the Llama family's names (``model.layers.*``, ``model.norm``, ``lm_head``)."""
    out = {f"model.{name[len(HF_PREFIX):]}": t for name, t in state.items() if name.startswith(HF_PREFIX)}
    if "lm_head.weight" in state:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


def text_config(hf_config: Any) -> Any:
    """The text config with what the Llama family reads from the top-level config (tied embeddings, the name the
    default profile is chosen by)."""
    config = copy.copy(hf_config.text_config)
    config.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
    config._name_or_path = hf_config._name_or_path
    return config


def text_precision(config: Any, optimizations: str | None) -> Precision:
    """The Llama family's profiles with the MLP weights in bfloat8_b in both, as Mllama's text model: bfloat4_b MLPs
    (tt-metal's Qwen2.5-VL performance mode) take the tiny test model's prefill logits PCC against HF to 0.971-0.976
    (bfloat8_b: 0.9996; the bfloat8_b attention and KV cache alone cost nothing measurable), host backend."""
    return replace(Precision.for_model(config, optimizations), mlp_weights=ttnn.bfloat8_b)


class Qwen2_5_VLText(LlamaModel):
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        config = text_config(hf_config)
        super().__init__(config, language_model_state(state), device, max_batch_size=max_batch_size,
                         max_seq_len=max_seq_len, optimizations=optimizations,
                         precision=text_precision(config, optimizations))
        section = list(config.rope_parameters["mrope_section"])
        if sum(section) != self.args.head_dim // 2:
            raise ValueError(f"mrope_section {section} must sum to head_dim / 2 = {self.args.head_dim // 2}")
        # The axis (0 temporal, 1 height, 2 width) each rotary frequency turns with.
        self.frequency_axis = torch.repeat_interleave(torch.arange(3), torch.tensor(section))

    def mrope_rotation(self, positions: torch.Tensor) -> tuple[Any, Any]:
        """cos/sin ``[1, 1, S, head_dim]`` of tokens at 3-D ``positions [3, S]`` (interleaved pairs)."""
        angles = positions[self.frequency_axis].T.float() * self.rope.inv_freq
        cos = (angles.cos() * self.rope.scaling).repeat_interleave(2, dim=-1)
        sin = (angles.sin() * self.rope.scaling).repeat_interleave(2, dim=-1)
        return as_tensor(cos[None, None], self.device), as_tensor(sin[None, None], self.device)

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                kv_cache: list[list[Any]], on_device: bool = False, *, positions: torch.Tensor | None = None,
                image_rows: torch.Tensor | None = None, image_table: Any = None) -> Any:
        """Run positions ``start .. end - 1`` of one user's token row; return the logits of position ``end - 1`` (host
        ``[V]``, or ``[1, 1, 1, V]`` on the device with ``on_device``). With the prompt's 3-D ``positions [3, >= end]``
        (None: text only, 1-D), and, when the chunk holds image tokens, ``image_rows [end]`` (each position's row of
        ``image_table``, -1 for text) and ``image_table`` ``[1, 1, image tokens, dim]`` on the device."""
        chunk = PrefillChunk.of(page_table, start, end, kv_cache[0][0].shape[2])
        for x in self.prefill_layers(tokens, chunk, kv_cache, positions=positions, image_rows=image_rows,
                                     image_table=image_table):
            pass
        return last_token_logits(x, chunk, self.norm, self.lm_head, self.device, on_device)

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, kv_cache: list[list[Any]], *,
                       positions: torch.Tensor | None = None, image_rows: torch.Tensor | None = None,
                       image_table: Any = None) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the (merged) embeddings and of each layer."""
        x = self.embedding.forward(chunk.padded_tokens(tokens))
        rows = chunk_image_rows(chunk, image_rows)
        if rows is not None:
            x = place_image_rows(x, rows, image_table, self.device)
        yield x
        yield from self.decoder_layers(x, self.prefill_rotation(chunk, positions), chunk, kv_cache)

    def prefill_rotation(self, chunk: PrefillChunk, positions: torch.Tensor | None) -> tuple[Any, Any]:
        """The chunk's cos/sin: at the prompt's 3-D ``positions [3, >= chunk.end]``, or 1-D (None: text only)."""
        if positions is None:
            return self.rope.prefill(chunk.start, chunk.padded)
        return self.mrope_rotation(_padded(positions[:, chunk.start: chunk.end], chunk.padded, 0))

    def decode_inputs_with_deltas(self, tokens: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor,
                                  deltas: torch.Tensor) -> HostInputs:
        """Decode inputs whose rotary position is ``position + delta`` (padding rows keep -1)."""
        rope_positions = torch.where(positions >= 0, positions + deltas, positions)
        return self.decode_inputs(tokens, positions, page_table, rope_positions=rope_positions)


def chunk_image_rows(chunk: PrefillChunk, image_rows: torch.Tensor | None) -> torch.Tensor | None:
    """The chunk's rows of the image table ``[chunk.padded]`` (-1: text and tile padding); None when it holds no image
    token."""
    if image_rows is None:
        return None
    rows = _padded(image_rows[chunk.start: chunk.end], chunk.padded, -1)
    return rows if bool((rows >= 0).any()) else None


def _padded(values: torch.Tensor, length: int, value: int) -> torch.Tensor:
    """``values`` padded along the last dim to ``length`` (the chunk's tile padding)."""
    return torch.nn.functional.pad(values, (0, length - values.shape[-1]), value=value)
