"""The contract plumbing shared by the generator classes of decoder-only image+text models (Gemma 3, Qwen2.5-VL):
one :class:`~tt_models.tt.image_text.ImageTextModel` replica per submesh, the prompt's image tokens found by the
config's ``image_token_id``, and decode as a text-only model runs it, through the replica's ``text`` decoder.
Prefill, where the families differ (images, masks, M-RoPE positions), is each family's own, on the pieces here:
the per-row image keywords, the prompt's image positions, where a chunk restarts."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.runtime import ttnn, use
from tt_models.tt.decode_inputs import HostInputs
from tt_models.tt.generator import Generator, as_torch
from tt_models.tt.image_text import ImageTextModel


def table_rows(is_image: torch.Tensor) -> torch.Tensor:
    """Each prompt position's row of its request's image table (images in prompt order), -1 for text."""
    rows = torch.full(is_image.shape, -1, dtype=torch.int64)
    rows[is_image] = torch.arange(int(is_image.sum()))
    return rows


def per_row(rows: Sequence[Any], **inputs: Sequence[Any] | None) -> list[list[Any]]:
    """Each of a prefill's per-row image keywords as a list of one entry a row (None, as the plugin passes for a
    batch without images: None for every row); their lengths must be the rows'."""
    lists = [[None] * len(rows) if entries is None else list(entries) for entries in inputs.values()]
    if any(len(entries) != len(rows) for entries in lists):
        counts = ", ".join(f"{len(entries)} {name}" for name, entries in zip(inputs, lists))
        raise ValueError(f"{len(rows)} prefill rows, {counts} entries")
    return lists


def row_images(pixel_values: Any, image_sizes: Any = None) -> list[torch.Tensor]:
    """One row's images ``[C, h, w]`` in prompt order: from None, one tensor or a list of per-item tensors
    (``[C, h, w]``, or ``[n, C, H, W]``: Gemma 3's crops, HF's padded batch), cropped to ``image_sizes [n, 2]`` when
    given (Mistral 3's images at their own sizes)."""
    if pixel_values is None:
        return []
    items = [pixel_values] if isinstance(pixel_values, torch.Tensor) else list(pixel_values)
    images = []
    for item in items:
        item = as_torch(item, torch.float32)
        images += [item] if item.dim() == 3 else list(item)
    if image_sizes is None:
        return images
    sizes = as_torch(image_sizes).reshape(-1, 2).tolist()
    if len(sizes) != len(images):
        raise ValueError(f"{len(images)} images but {len(sizes)} image_sizes")
    return [image[:, :h, :w] for image, (h, w) in zip(images, sizes)]


def chunk_start(start: int, kv_cache: Any) -> int:
    """Where a prefill chunk from ``start`` restarts: the first position of its block (one replica's cache)."""
    block_size = kv_cache[0][0].shape[2]
    return start // block_size * block_size


class ImageTextGenerator(Generator):
    # The replica class: ``model_class(hf_config, state, device, *, max_batch_size, max_seq_len, optimizations)``.
    model_class: type[ImageTextModel]
    models: list[ImageTextModel]

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1,
                        optimizations: str | None = None) -> "ImageTextGenerator":
        generator = cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, lambda device, users:
                                       cls.model_class(hf_config, state, device, max_batch_size=users,
                                                       max_seq_len=max_seq_len, optimizations=optimizations))
        generator.image_token_id = hf_config.image_token_id
        return generator

    def image_mask(self, row: int, tokens: torch.Tensor, end: int, images: Sequence[Any]) -> torch.Tensor | None:
        """Which positions of prefill row ``row``'s prompt ``tokens[:end]`` are image tokens; None for a text-only
        prompt (which refuses images)."""
        is_image = tokens[:end] == self.image_token_id
        if bool(is_image.any()):
            return is_image
        if images:
            raise ValueError(f"prefill row {row}: {len(images)} images but no image tokens in the prompt")
        return None

    def decode_forward(self, *, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any,
                       enable_trace: bool = False, read_from_device: bool = True, sampling_params: Any = None,
                       prompt_tokens: Any = None, output_tokens: Any = None, reset_batch: bool | None = None,
                       page_tables_per_group: Any = None, page_tables_per_layer: Any = None, **kwargs: Any) -> Any:
        """One token per row of a batch padded to ``max_batch_size``; logits ``[B, 1, V]`` (tokens ``[B]`` with
        ``sampling_params``)."""
        return self.decode_step(self.decode_inputs,
                                lambda model, device_inputs, cache: model.text.decode_device(device_inputs, cache),
                                tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=kv_cache,
                                enable_trace=enable_trace, read_from_device=read_from_device,
                                sampling_params=sampling_params, prompt_tokens=prompt_tokens,
                                output_tokens=output_tokens, reset_batch=reset_batch,
                                group_tables=self.group_page_tables(page_tables_per_group, page_tables_per_layer))

    def decode_inputs(self, model: ImageTextModel, rows: slice, tokens: torch.Tensor, positions: torch.Tensor,
                      page_table: torch.Tensor) -> HostInputs:
        """The host decode inputs of one replica, whose batch slots are ``rows``."""
        return model.text.decode_inputs(tokens, positions, page_table)

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the vision tower (a blank image) and the text prefill; the page table is all ``-1``, so nothing
        is written to the cache."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            block_size = kv_cache[replica][0][0].shape[2]
            with use(device):
                ttnn.deallocate(model.image_tokens(*model.blank_image()))
                model.text.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                                   torch.full((1,), -1, dtype=torch.int32), kv_cache[replica])
