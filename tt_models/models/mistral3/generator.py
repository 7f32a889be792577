"""The TT vLLM generator class of Mistral 3 (Pixtral vision + Mistral text), driven as TT vLLM's plugin (b95c050)
drives an image+text model without M-RoPE (``research/vlm_v1.md`` section 1).

- ``prefill_forward(*, tokens, page_table, kv_cache, prompt_lens, start_pos, pixel_values, image_sizes=None, ...)``:
  ``pixel_values[i]`` is None (a text-only row) or the row's images in prompt order, one ``[C, h, w]`` tensor each
  at the image's own size (vLLM's Mistral 3 processor crops each item to its ``image_sizes``; the plugin passes no
  ``image_sizes``). HF's layout is taken too: a ``[n, C, H, W]`` batch padded to its largest image with
  ``image_sizes[i]`` ``[n, 2]`` (height, width). ``tokens[i, :prompt_lens[i]]`` holds the prompt with each image's
  ``[IMG]`` / ``[IMG_BREAK]`` / ``[IMG_END]`` tokens expanded (vLLM's processor does it). Returns the logits
  ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``). Attention is causal, so a
  chunk with ``start_pos > 0`` runs over the cached positions; one holding ``[IMG]`` tokens needs the row's images
  (those whose tokens start before the chunk's end at least).
- ``decode_forward``: as the text-only classes (the sliding window, when the config sets one, trims the reads).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.models.mistral3.model import Mistral3Model
from tt_models.runtime import ttnn, use
from tt_models.tt.generator import as_torch
from tt_models.tt.image_text_generator import ImageTextGenerator, chunk_start, per_row, row_images, table_rows


class Mistral3ForConditionalGeneration(ImageTextGenerator):
    """Mistral 3: images + text in, text out; image tokens in the prompt, causal attention throughout."""

    # As tt-metal declares its image+text classes (vLLM also turns prefix caching off with a sliding window).
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": True}
    model_class = Mistral3Model
    models: list[Mistral3Model]

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        pixel_values: Sequence[Any] | None = None, image_sizes: Sequence[Any] | None = None,
                        enable_trace: bool = False, empty_slots: Any = None, sampling_params: Any = None,
                        **kwargs: Any) -> Any:
        """Logits ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``)."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table = as_torch(page_table, torch.int32)
        pixel_values, image_sizes = per_row(rows, pixel_values=pixel_values, image_sizes=image_sizes)
        out = []
        for row, (start, end, replica) in enumerate(rows):
            with use(self.devices[replica]):
                out.append(self._prefill_row(row, tokens[row], start, end, page_table[row],
                                             row_images(pixel_values[row], image_sizes[row]), replica,
                                             kv_cache[replica], sampling_params is not None))
        if sampling_params is not None:
            return self.sample_prefill(out, rows, tokens, sampling_params)
        return torch.stack(out)[:, None, :]

    def _prefill_row(self, row: int, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                     images: list[torch.Tensor], replica: int, kv_cache: Any, on_device: bool) -> Any:
        model = self.models[replica]
        is_image = self.image_mask(row, tokens, end, images)
        if is_image is None or not bool(is_image[chunk_start(start, kv_cache):].any()):  # the chunk's run: text only
            return model.text.prefill(tokens, start, end, page_table, kv_cache, on_device)
        # The images whose tokens start before the chunk's end (a chunk may end between or inside images).
        count = int(is_image.sum())
        starts = torch.cumsum(torch.tensor([0] + [model.tokens_of(image) for image in images]), 0)
        if count > int(starts[-1]):
            raise ValueError(f"prefill row {row}: {count} image tokens in the prompt but the {len(images)} images "
                             f"have {int(starts[-1])}")
        needed = int((starts[:-1] < count).sum())
        table = model.image_table(images[:needed])
        logits = model.text.prefill(tokens, start, end, page_table, kv_cache, on_device,
                                    image_rows=table_rows(is_image), image_table=table)
        ttnn.deallocate(table)
        return logits
