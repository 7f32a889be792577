"""The TT vLLM generator classes of Gemma 3: the image+text model, driven as TT vLLM's plugin (b95c050) drives an
image+text model without M-RoPE (``research/vlm_v1.md`` section 1), and text-only Gemma 3 (:class:`Gemma3ForCausalLM`,
its text decoder alone, driven as the Llama family).

- ``prefill_forward(*, tokens, page_table, kv_cache, prompt_lens, start_pos, pixel_values, ...)``: ``pixel_values[i]``
  is None (a text-only row) or the row's images, one tensor per item as vLLM's processor gives them:
  ``[crops, C, H, W]`` (``[1, C, H, W]`` without pan-and-scan; a ``[C, H, W]`` image is taken too), each crop an
  image of ``mm_tokens_per_image`` tokens in the prompt, in order. ``tokens[i, :prompt_lens[i]]`` holds the prompt
  with each image's ``<image_soft_token>`` placeholders expanded (vLLM's processor does it). Returns the logits
  ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``). A chunk with ``start_pos > 0``
  (the plugin never sends one for Gemma 3: no chunked prefill, no prefix caching) runs causally when it holds no
  image tokens; one that holds some is rerun from position 0 and needs the row's images again (those whose tokens
  start before the chunk's end at least: the chunk may end between or inside images).
- ``decode_forward``: as the text-only classes.
- ``page_tables_per_group`` (tt-models' engine) or ``page_tables_per_layer`` (TT vLLM's plugin), in both forwards: a
  page table per KV-cache group that :meth:`get_kv_cache_spec` declares (the global layers' and the sliding layers'),
  each layer reading and writing its group's; without them every layer uses ``page_table`` (its whole history).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tt_models.models.gemma3.model import Gemma3Model, text_precision
from tt_models.models.gemma3.text import Gemma3Text, layer_windows, text_state
from tt_models.runtime import ttnn, use
from tt_models.tt.generator import Generator, as_torch
from tt_models.tt.image_text_generator import ImageTextGenerator, chunk_start, per_row, row_images, table_rows


def _row_of(group_tables: list[torch.Tensor] | None, row: int) -> list[torch.Tensor] | None:
    """One prefill row's table of each KV-cache group."""
    return None if group_tables is None else [table[row] for table in group_tables]


class Gemma3ForConditionalGeneration(ImageTextGenerator):
    """Gemma 3: images + text in, text out; image tokens in the prompt attend one another both ways in prefill."""

    # As tt-metal declares it for Gemma 3 (no prefix caching: vLLM turns it off for sliding-window models).
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": True}
    model_class = Gemma3Model
    models: list[Gemma3Model]

    @classmethod
    def layer_windows(cls, hf_config: Any) -> list[int | None]:
        return layer_windows(getattr(hf_config, "text_config", hf_config))

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        pixel_values: Sequence[Any] | None = None, enable_trace: bool = False, empty_slots: Any = None,
                        sampling_params: Any = None, page_tables_per_group: Any = None,
                        page_tables_per_layer: Any = None, **kwargs: Any) -> Any:
        """Logits ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``)."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table = as_torch(page_table, torch.int32)
        groups = self.group_page_tables(page_tables_per_group, page_tables_per_layer)
        [pixel_values] = per_row(rows, pixel_values=pixel_values)
        out = []
        for row, (start, end, replica) in enumerate(rows):
            with use(self.devices[replica]):
                out.append(self._prefill_row(row, tokens[row], start, end, page_table[row],
                                             row_images(pixel_values[row]), replica, kv_cache[replica],
                                             sampling_params is not None, _row_of(groups, row)))
        if sampling_params is not None:
            return self.sample_prefill(out, rows, tokens, sampling_params)
        return torch.stack(out)[:, None, :]

    def _prefill_row(self, row: int, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor,
                     images: list[torch.Tensor], replica: int, kv_cache: Any, on_device: bool,
                     group_tables: list[torch.Tensor] | None) -> Any:
        model = self.models[replica]
        is_image = self.image_mask(row, tokens, end, images)
        if is_image is None or not bool(is_image[chunk_start(start, kv_cache):].any()):  # the chunk's run: text only
            return model.text.prefill(tokens, start, end, page_table, kv_cache, on_device, group_tables=group_tables)
        # Image tokens attend their whole image both ways, which only a first chunk's masked SDPA can do: a later
        # chunk holding some (a recomputation, a one-token step) reruns the prompt from position 0, rewriting the
        # cached K/V with the same values.
        start = 0
        # The images whose tokens start before the chunk's end: a chunk may end between or inside images (the caller
        # may hand every chunk all the row's images); a cut image's K/V here sees only its first part, and the chunk
        # holding the rest reruns the prompt with the whole image.
        count = int(is_image.sum())
        needed = -(-count // model.tokens_per_image)
        if needed > len(images):
            raise ValueError(f"prefill row {row}: {count} image tokens in the prompt but {len(images)} images of "
                             f"{model.tokens_per_image} tokens")
        table = model.image_table(images[:needed])
        logits = model.text.prefill(tokens, start, end, page_table, kv_cache, on_device,
                                    image_rows=table_rows(is_image), image_table=table, group_tables=group_tables)
        ttnn.deallocate(table)
        return logits


class Gemma3ForCausalLM(Generator):
    """Text-only Gemma 3 (``gemma3_text``, e.g. Gemma 3 1B): the image model's text decoder alone, the same
    :class:`~tt_models.models.gemma3.text.Gemma3Text` with the same precision."""

    model_capabilities = Gemma3ForConditionalGeneration.model_capabilities
    models: list[Gemma3Text]

    @classmethod
    def layer_windows(cls, hf_config: Any) -> list[int | None]:
        return layer_windows(hf_config)

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1,
                        optimizations: str | None = None) -> "Gemma3ForCausalLM":
        state = text_state(state)
        return cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, lambda device, users: Gemma3Text(
            hf_config, state, device, max_batch_size=users, max_seq_len=max_seq_len,
            precision=text_precision(hf_config, optimizations)))

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the prefill at one block; the page table is all ``-1``, so nothing is written to the cache."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            block_size = kv_cache[replica][0][0].shape[2]
            with use(device):
                model.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                              torch.full((1,), -1, dtype=torch.int32), kv_cache[replica])

    def prefill_forward(self, *, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any = None,
                        enable_trace: bool = False, empty_slots: Any = None, sampling_params: Any = None,
                        page_tables_per_group: Any = None, page_tables_per_layer: Any = None, **kwargs: Any) -> Any:
        """Logits ``[n, 1, V]`` of each row's last position (tokens ``[n]`` with ``sampling_params``); a chunk with
        ``start_pos > 0`` runs causally over the cached ones."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table = as_torch(page_table, torch.int32)
        groups = self.group_page_tables(page_tables_per_group, page_tables_per_layer)
        out = []
        for row, (start, end, replica) in enumerate(rows):
            with use(self.devices[replica]):
                out.append(self.models[replica].prefill(tokens[row], start, end, page_table[row], kv_cache[replica],
                                                        sampling_params is not None, group_tables=_row_of(groups, row)))
        if sampling_params is not None:
            return self.sample_prefill(out, rows, tokens, sampling_params)
        return torch.stack(out)[:, None, :]
