"""The TT vLLM generator class of Qwen2.5-VL, driven as TT vLLM's plugin (b95c050) drives an M-RoPE model
(``research/vlm_v1.md`` section 1).

- ``prefill_forward(*, tokens, page_table, kv_cache, prompt_lens, start_pos, pixel_values, image_grid_thw, ...)``:
  ``pixel_values[i]`` is None (a text-only row) or the row's images, one ``[t * h * w, C * T * p * p]`` tensor each
  (vLLM's processor output per item), ``image_grid_thw[i]`` their ``(t, h, w)`` grids. ``tokens[i, :prompt_lens[i]]``
  holds the prompt from position 0 with each image's placeholder tokens expanded (vLLM's processor does it).
  Returns ``(logits [n, 1, V], rope_deltas [n])``: every row's delta (0 for text-only rows), which the runner
  keeps per request; the model keeps it too, in the row's batch slot (``empty_slots``).
- ``decode_forward(..., rope_deltas_all_users=None, slot_remap=None)``: the plugin sends every row's delta when a
  request joined since the last decode, and ``slot_remap`` (row ``i`` takes slot ``remap[i]``'s state) when rows
  moved; the per-slot deltas follow both.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.models.qwen2_5_vl.model import Qwen2_5_VLModel
from tt_models.models.qwen2_5_vl.rope_index import mrope_positions
from tt_models.runtime import ttnn, use
from tt_models.tt.decode_inputs import HostInputs
from tt_models.tt.generator import as_torch
from tt_models.tt.image_text_generator import ImageTextGenerator, chunk_start, per_row, table_rows


def row_images(pixel_values: Any, grids: Any) -> tuple[list[torch.Tensor], list[tuple[int, int, int]]]:
    """One row's images and grids: lists (the plugin's) or concatenated tensors (HF's), None for none."""
    if grids is None:
        if pixel_values is not None and len(pixel_values):
            raise ValueError("pixel_values without image_grid_thw")
        return [], []
    if isinstance(grids, torch.Tensor):
        grids = list(grids.reshape(-1, 3))
    grids = [tuple(int(v) for v in as_torch(g).reshape(3)) for g in grids]
    if pixel_values is None:
        return [], grids
    if isinstance(pixel_values, torch.Tensor):
        pixel_values = pixel_values.split([t * h * w for t, h, w in grids])
    if len(pixel_values) != len(grids):
        raise ValueError(f"{len(pixel_values)} images but {len(grids)} image grids")
    return list(pixel_values), grids


class Qwen2_5_VLForConditionalGeneration(ImageTextGenerator):
    """Qwen2.5-VL: images + text in, text out; image tokens in the prompt, M-RoPE positions."""

    # As tt-metal declares it for Qwen2.5-VL (no prefix caching: a cached prefix would need its images' positions).
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": True}
    model_class = Qwen2_5_VLModel
    models: list[Qwen2_5_VLModel]

    def __init__(self, models: list[Qwen2_5_VLModel], devices: list[Any], max_batch_size: int) -> None:
        super().__init__(models, devices, max_batch_size)
        self.rope_deltas = torch.zeros(max_batch_size, dtype=torch.int64)  # per batch slot

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        pixel_values: Sequence[Any] | None = None, image_grid_thw: Sequence[Any] | None = None,
                        enable_trace: bool = False, empty_slots: Any = None, sampling_params: Any = None,
                        **kwargs: Any) -> tuple[Any, torch.Tensor]:
        """Logits ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``) and the rows'
        rope deltas ``[n]``."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table = as_torch(page_table, torch.int32)
        pixel_values, image_grid_thw = per_row(rows, pixel_values=pixel_values, image_grid_thw=image_grid_thw)
        slots = range(len(rows)) if empty_slots is None else as_torch(empty_slots).tolist()
        out, deltas = [], torch.zeros(len(rows), dtype=torch.int64)
        for row, (start, end, replica) in enumerate(rows):
            with use(self.devices[replica]):
                logits, deltas[row] = self._prefill_row(row, tokens[row], start, end, page_table[row],
                                                        *row_images(pixel_values[row], image_grid_thw[row]),
                                                        replica, kv_cache[replica], sampling_params is not None)
            out.append(logits)
        self.rope_deltas[list(slots)] = deltas
        if sampling_params is not None:
            return self.sample_prefill(out, rows, tokens, sampling_params), deltas
        return torch.stack(out)[:, None, :], deltas

    def _prefill_row(self, row: int, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                     images: list[torch.Tensor], grids: list[tuple[int, int, int]], replica: int, kv_cache: Any,
                     on_device: bool) -> tuple[Any, int]:
        model = self.models[replica]
        is_image = self.image_mask(row, tokens, end, images)
        if is_image is None:
            return model.text.prefill(tokens, start, end, page_table, kv_cache, on_device), 0
        if not grids:
            raise ValueError(f"prefill row {row}: image tokens in the prompt but no image_grid_thw")
        positions, delta = mrope_positions(tokens[:end], grids, self.image_token_id, model.vision_args.merge)
        table = None
        if bool(is_image[chunk_start(start, kv_cache):].any()):
            if not images:
                raise ValueError(f"prefill row {row}: the chunk holds image tokens but pixel_values has no images")
            table = model.image_table(images, grids)
        logits = model.text.prefill(tokens, start, end, page_table, kv_cache, on_device, positions=positions,
                                    image_rows=table_rows(is_image), image_table=table)
        if table is not None:
            ttnn.deallocate(table)
        return logits, delta

    def decode_forward(self, *, rope_deltas_all_users: Sequence[int] | None = None, slot_remap: Any = None,
                       **kwargs: Any) -> Any:
        """As :meth:`ImageTextGenerator.decode_forward` (its keywords), each row rotated at its position plus its
        slot's delta."""
        if slot_remap is not None:  # row i takes slot remap[i]'s state, as the plugin moves every per-slot state
            remap = as_torch(slot_remap).reshape(-1)
            moved = self.rope_deltas.clone()
            moved[: len(remap)] = self.rope_deltas[remap]
            self.rope_deltas = moved
        if rope_deltas_all_users is not None:
            given = as_torch(rope_deltas_all_users).reshape(-1)
            self.rope_deltas[: len(given)] = given
        return super().decode_forward(**kwargs)

    def decode_inputs(self, model: Qwen2_5_VLModel, rows: slice, tokens: torch.Tensor, positions: torch.Tensor,
                      page_table: torch.Tensor) -> HostInputs:
        return model.text.decode_inputs_with_deltas(tokens, positions, page_table, self.rope_deltas[rows])
