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
from tt_models.tt.generator import Generator, as_torch


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


class Qwen2_5_VLForConditionalGeneration(Generator):
    """Qwen2.5-VL: images + text in, text out; image tokens in the prompt, M-RoPE positions."""

    # As tt-metal declares it for Qwen2.5-VL (no prefix caching: a cached prefix would need its images' positions).
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": True}

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1,
                        optimizations: str | None = None) -> "Qwen2_5_VLForConditionalGeneration":
        generator = cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, lambda device, users:
                                       Qwen2_5_VLModel(hf_config, state, device, max_batch_size=users,
                                                       max_seq_len=max_seq_len, optimizations=optimizations))
        generator.image_token_id = hf_config.image_token_id
        generator.rope_deltas = torch.zeros(max_batch_size, dtype=torch.int64)  # per batch slot
        return generator

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        pixel_values: Sequence[Any] | None = None, image_grid_thw: Sequence[Any] | None = None,
                        enable_trace: bool = False, empty_slots: Any = None, sampling_params: Any = None,
                        **kwargs: Any) -> tuple[Any, torch.Tensor]:
        """Logits ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``) and the rows'
        rope deltas ``[n]``."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table = as_torch(page_table, torch.int32)
        pixel_values = [None] * len(rows) if pixel_values is None else list(pixel_values)
        image_grid_thw = [None] * len(rows) if image_grid_thw is None else list(image_grid_thw)
        if not len(pixel_values) == len(image_grid_thw) == len(rows):
            raise ValueError(f"{len(rows)} prefill rows, {len(pixel_values)} pixel_values, "
                             f"{len(image_grid_thw)} image_grid_thw entries")
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
        is_image = tokens[:end] == self.image_token_id
        if not bool(is_image.any()):
            if images:
                raise ValueError(f"prefill row {row}: {len(images)} images but no image tokens in the prompt")
            return model.text.prefill(tokens, start, end, page_table, kv_cache, on_device), 0
        if not grids:
            raise ValueError(f"prefill row {row}: image tokens in the prompt but no image_grid_thw")
        positions, delta = mrope_positions(tokens[:end], grids, self.image_token_id, model.vision_args.merge)
        image_rows = torch.full((end,), -1, dtype=torch.int64)
        image_rows[is_image] = torch.arange(int(is_image.sum()))
        chunk_start = start // kv_cache[0][0].shape[2] * kv_cache[0][0].shape[2]  # where the chunk restarts
        table = None
        if bool(is_image[chunk_start:].any()):
            if not images:
                raise ValueError(f"prefill row {row}: the chunk holds image tokens but pixel_values has no images")
            table = model.image_table(images, grids)
        logits = model.text.prefill(tokens, start, end, page_table, kv_cache, on_device, positions=positions,
                                    image_rows=image_rows, image_table=table)
        if table is not None:
            ttnn.deallocate(table)
        return logits, delta

    def decode_forward(self, *, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any,
                       rope_deltas_all_users: Sequence[int] | None = None, slot_remap: Any = None,
                       enable_trace: bool = False, read_from_device: bool = True, sampling_params: Any = None,
                       prompt_tokens: Any = None, output_tokens: Any = None, **kwargs: Any) -> Any:
        """One token per row of a batch padded to ``max_batch_size``, each rotated at its position plus its slot's
        delta; logits ``[B, 1, V]`` (tokens ``[B]`` with ``sampling_params``)."""
        tokens, positions = as_torch(tokens).reshape(-1), as_torch(start_pos)
        page_table = as_torch(page_table, torch.int32)
        self.check_decode_batch(tokens, positions, page_table)
        if slot_remap is not None:  # row i takes slot remap[i]'s state, as the plugin moves every per-slot state
            remap = as_torch(slot_remap).reshape(-1)
            moved = self.rope_deltas.clone()
            moved[: len(remap)] = self.rope_deltas[remap]
            self.rope_deltas = moved
        if rope_deltas_all_users is not None:
            given = as_torch(rope_deltas_all_users).reshape(-1)
            self.rope_deltas[: len(given)] = given
        inputs = []
        for replica, model in enumerate(self.models):
            rows = self.replica_rows(replica)
            with use(self.devices[replica]):
                inputs.append(model.text.decode_inputs_with_deltas(tokens[rows], positions[rows], page_table[rows],
                                                                   self.rope_deltas[rows]))

        def forward(replica: int, device_inputs: dict[str, Any]) -> Any:
            return self.models[replica].text.decode_device(device_inputs, kv_cache[replica])

        return self.run_decode(inputs, forward, positions=positions, enable_trace=enable_trace,
                               read_from_device=read_from_device, sampling_params=sampling_params,
                               prompt_tokens=prompt_tokens, output_tokens=output_tokens)

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the vision tower (the smallest image) and the text prefill; the page table is all ``-1``, so
        nothing is written to the cache."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            block_size = kv_cache[replica][0][0].shape[2]
            args = model.vision_args
            with use(device):
                ttnn.deallocate(model.vision.forward(torch.zeros(args.merge ** 2, args.patch_width),
                                                     (1, args.merge, args.merge)))
                model.text.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                                   torch.full((1,), -1, dtype=torch.int32), kv_cache[replica])
