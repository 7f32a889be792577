"""The TT vLLM contract of Llama 3.2 Vision (the design's image+text encoder-decoder contract).

- ``max_cross_attn_tokens``: vision tokens of one image (``max_num_tiles * patches``); an image request needs
  ``ceil(max_cross_attn_tokens / block_size)`` cross blocks.
- ``prefill_forward(*, tokens, images, page_table, kv_cache, prompt_lens, cross_page_table, ...)``: ``images[i]`` is
  a list of ``PIL.Image.Image`` for row ``i`` (at most one; empty or None: text only). Returns ``(logits,
  cross_attention_masks, full_text_row_masked_out_mask)``, the last two with one object per row that the caller
  keeps per request and hands back at every decode (and, as tt-models' extension, to a later prefill chunk of the
  same request, whose ``images[i]`` is then None: its vision K/V is already in its cross blocks; each prefill
  returns the request's up-to-date mask). ``tokens[i, :prompt_lens[i]]`` must hold the prompt from position 0
  (as TT vLLM passes it): the ``<|image|>`` token's position is read from it.
- ``decode_forward(*, tokens, start_pos, cross_attention_masks, full_text_row_masked_out_mask, page_table,
  kv_cache, cross_page_table, ...)``: the mask lists aligned with the padded decode rows (None: no image).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import torch

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.mllama.images import ImageInput, image_processor, preprocess
from tt_models.models.mllama.masks import CrossAttentionMask, decode_text_row
from tt_models.models.mllama.model import MllamaModel
from tt_models.runtime import use
from tt_models.tt.decode_inputs import HostInputs
from tt_models.tt.generator import Generator, as_torch
from tt_models.tt.weights import as_tensor, to_host


class MllamaForConditionalGeneration(Generator):
    """Llama 3.2 Vision: image + text in, text out, with paged cross-attention over the vision tokens."""

    # As tt_transformers declares it for Mllama, with device sampling (tokens fed back on the device: decode_feedback).
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": True}
    max_cross_attn_tokens: int

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int = 4096,
                              tt_data_parallel: int = 1, optimizations: str | None = None,
                              **kwargs: Any) -> "MllamaForConditionalGeneration":
        """Weights and the image processor come from ``hf_config._name_or_path`` (an HF directory)."""
        checkpoint = load_hf_checkpoint(hf_config._name_or_path)
        return cls.from_state_dict(hf_config, checkpoint.state_dict, mesh_device, max_batch_size,
                                   max_seq_len=max_seq_len, tt_data_parallel=tt_data_parallel,
                                   optimizations=optimizations, checkpoint_dir=checkpoint.source)

    @classmethod
    def from_state_dict(cls, hf_config: Any, state: dict[str, torch.Tensor], mesh_device: Any, max_batch_size: int,
                        max_seq_len: int = 4096, tt_data_parallel: int = 1, optimizations: str | None = None,
                        checkpoint_dir: Any = None) -> "MllamaForConditionalGeneration":
        generator = cls.build_replicas(mesh_device, max_batch_size, tt_data_parallel, lambda device, users: MllamaModel(
            hf_config, state, device, max_batch_size=users, max_seq_len=max_seq_len, optimizations=optimizations))
        generator.max_cross_attn_tokens = generator.models[0].vision_args.vision_tokens
        generator.image_token_id = hf_config.image_token_index
        generator.image_processor = image_processor(checkpoint_dir, hf_config.vision_config)
        return generator

    def _image_position(self, row: int, tokens: torch.Tensor, end: int) -> int:
        """Where the row's ``<|image|>`` token is; ``end`` while a chunked prefill has not reached it (the rows so
        far then attend as HF's rows before the image token do)."""
        found = (tokens[:end] == self.image_token_id).nonzero().flatten().tolist()
        if len(found) > 1:
            raise ValueError(f"prefill row {row}: {len(found)} <|image|> tokens; Llama 3.2 Vision on TT takes one "
                             "image, so one token, per request")
        return found[0] if found else end

    def _row_mask(self, row: int, tokens: torch.Tensor, end: int, images: Any, earlier: Any,
                  cross_row: torch.Tensor, block_size: int, replica: int, kv_cache: Any) -> CrossAttentionMask | None:
        """The row's mask; with an image, its vision tokens are computed and written to its cross blocks."""
        images = list(images or [])
        if len(images) > 1:
            raise ValueError(f"prefill row {row}: {len(images)} images; Llama 3.2 Vision on TT takes one per request")
        image_position = self._image_position(row, tokens, end)
        if not images:
            if earlier is not None:
                return replace(earlier, image_position=image_position)
            if image_position < end:
                raise ValueError(f"prefill row {row}: an <|image|> token but no image")
            return None
        blocks = -(-self.max_cross_attn_tokens // block_size)
        if cross_row.shape[0] < blocks:
            raise ValueError(f"prefill row {row}: an image needs {blocks} cross blocks, cross_page_table has "
                             f"{cross_row.shape[0]} columns")
        image = preprocess(self.image_processor, images[0])
        model = self.models[replica]
        vision_tokens = model.vision_tokens(image)
        model.text.fill_cross(vision_tokens, cross_row, kv_cache)
        return CrossAttentionMask(image_position, image.num_tiles * model.vision_args.patches,
                                  self.max_cross_attn_tokens)

    def prefill_forward(self, *, tokens: Any, images: Sequence[Any] | None = None, page_table: Any, kv_cache: Any,
                        prompt_lens: Any, cross_page_table: Any, sampling_params: Any = None, empty_slots: Any = None,
                        start_pos: Any = None, enable_trace: bool = False,
                        cross_attention_masks: Sequence[CrossAttentionMask | None] | None = None,
                        **kwargs: Any) -> tuple[torch.Tensor, list[Any], list[Any]]:
        """Logits ``[n, 1, V]`` of each row's last position, and the rows' masks for decode."""
        tokens, rows = self.prefill_rows(tokens, prompt_lens, start_pos, empty_slots)
        page_table, cross_page_table = as_torch(page_table, torch.int32), as_torch(cross_page_table, torch.int32)
        images = [None] * len(rows) if images is None else list(images)
        earlier = [None] * len(rows) if cross_attention_masks is None else list(cross_attention_masks)
        if not len(images) == len(earlier) == len(rows):
            raise ValueError(f"{len(rows)} prefill rows, {len(images)} images entries, {len(earlier)} masks")
        logits, masks = [], []
        for row, (start, end, replica) in enumerate(rows):
            cache = kv_cache[replica]
            with use(self.devices[replica]):
                mask = self._row_mask(row, tokens[row], end, images[row], earlier[row], cross_page_table[row],
                                      cache[0][0].shape[2], replica, cache)
                logits.append(self.models[replica].text.prefill(tokens[row], start, end, page_table[row],
                                                                cross_page_table[row], mask, cache,
                                                                on_device=sampling_params is not None))
            masks.append(mask)
        out = (torch.stack(logits)[:, None, :] if sampling_params is None
               else self.sample_prefill(logits, rows, tokens, sampling_params))
        return out, masks, [decode_text_row(m) for m in masks]

    # Encoder disaggregation (tt_models.disagg): the vision encoder on an encode instance.

    def encode_forward(self, encoder_inputs: list[Any], **kwargs: Any) -> list[torch.Tensor]:
        """Each ``{"image": PIL image}``'s vision tokens ``[max_num_tiles * patches, dim]`` (on the first replica):
        what ``prefill_forward`` writes to the cross blocks of an image request."""
        model, device = self.models[0], self.devices[0]
        out = []
        with use(device):
            for row, entry in enumerate(encoder_inputs):
                if not isinstance(entry, dict) or "image" not in entry:
                    raise ValueError(f"encoder_inputs[{row}] must be a dict with 'image'")
                out.append(to_host(model.vision_tokens(preprocess(self.image_processor, entry["image"])),
                                   device)[0, 0].float())
        return out

    def write_cross_kv(self, kv_cache: Any, encoder_states: list[torch.Tensor], cross_page_table: Any,
                       encoder_lens: Any, empty_slots: Any = None, **kwargs: Any) -> None:
        """Vision tokens from :meth:`encode_forward` into row ``i``'s cross blocks, on the replica of its slot; a
        later ``prefill_forward`` takes the row with ``images[i] = None`` and the mask of :meth:`image_mask`."""
        cross_page_table, encoder_lens = as_torch(cross_page_table, torch.int32), as_torch(encoder_lens).tolist()
        slots = range(len(encoder_lens)) if empty_slots is None else as_torch(empty_slots).tolist()
        for row, (states, length, slot) in enumerate(zip(encoder_states, encoder_lens, slots)):
            dim = self.models[0].text.args.dim
            if length != self.max_cross_attn_tokens or tuple(states.shape) != (length, dim):
                raise ValueError(f"write_cross_kv row {row}: states of shape {list(states.shape)} for encoder_len "
                                 f"{length}; expected [{self.max_cross_attn_tokens}, {dim}]")
            replica = self.replica_of_slot(slot)
            with use(self.devices[replica]):
                self.models[replica].text.fill_cross(as_tensor(states[None, None], self.devices[replica]),
                                                     cross_page_table[row], kv_cache[replica])

    def image_mask(self, image: Any) -> CrossAttentionMask:
        """The mask of a request whose image's vision tokens are in its cross blocks already (written by
        :meth:`write_cross_kv`): what its first ``prefill_forward`` takes in ``cross_attention_masks``. Only the
        image's tile count is computed; the image token's position is the prefill's."""
        num_tiles = preprocess(self.image_processor, image).num_tiles
        return CrossAttentionMask(0, num_tiles * self.models[0].vision_args.patches, self.max_cross_attn_tokens)

    def decode_forward(self, *, tokens: Any, start_pos: Any, cross_attention_masks: Sequence[Any] | None = None,
                       full_text_row_masked_out_mask: Sequence[Any] | None = None, page_table: Any, kv_cache: Any,
                       cross_page_table: Any, enable_trace: bool = False, read_from_device: bool = True,
                       sampling_params: Any = None, reset_batch: bool | None = None,
                       **kwargs: Any) -> Any:
        """One token per row of a batch padded to ``max_batch_size``; logits ``[B, 1, V]``."""
        cross_page_table = as_torch(cross_page_table, torch.int32)
        masks, text_rows = self._aligned(cross_attention_masks), self._aligned(full_text_row_masked_out_mask)
        visible = torch.tensor([0 if m is None else m.image_tokens for m in masks])
        text_rows = torch.tensor([0.0 if t is None else float(t) for t in text_rows])

        def build(model: MllamaModel, rows: slice, tokens: torch.Tensor, positions: torch.Tensor,
                  page_table: torch.Tensor) -> HostInputs:
            return model.text.decode_inputs(tokens, positions, page_table, cross_page_table[rows], visible[rows],
                                            text_rows[rows])

        return self.decode_step(build,
                                lambda model, device_inputs, cache: model.text.decode_device(device_inputs, cache),
                                tokens=tokens, start_pos=start_pos, page_table=page_table, kv_cache=kv_cache,
                                enable_trace=enable_trace, read_from_device=read_from_device,
                                sampling_params=sampling_params, prompt_tokens=kwargs.get("prompt_tokens"),
                                output_tokens=kwargs.get("output_tokens"), reset_batch=reset_batch,
                                batch_inputs=(cross_page_table,))

    def _aligned(self, values: Sequence[Any] | None) -> list[Any]:
        """A per-row list padded with None to ``max_batch_size`` (TT's V0 runner passed the scheduled rows only)."""
        values = list(values or [])
        if len(values) > self.max_batch_size:
            raise ValueError(f"{len(values)} decode masks for a batch of {self.max_batch_size}")
        return values + [None] * (self.max_batch_size - len(values))

    def padding_decode_inputs(self, rows: int, table_width: int) -> dict[str, Any]:
        return {"cross_page_table": torch.zeros(rows, table_width, dtype=torch.int32)}

    def warmup_model_prefill(self, kv_cache: Any = None, enable_trace: bool = False, can_sample_on_device: bool = False,
                             **kwargs: Any) -> None:
        """Compile the vision encoder and the prefill path. Every block written is ``-1`` (skipped by the fill ops),
        so the cache is untouched; the cross reads go to block 0 and their results are discarded."""
        if kv_cache is None:
            return
        for replica, (model, device) in enumerate(zip(self.models, self.devices)):
            cache = kv_cache[replica]
            block_size = cache[0][0].shape[2]
            cross_blocks = -(-self.max_cross_attn_tokens // block_size)
            with use(device):
                args = model.vision_args
                pixels = torch.zeros(args.max_num_tiles, args.channels, args.image_size, args.image_size)
                vision_tokens = model.vision_tokens(ImageInput(pixels, aspect_ratio_id=1, num_tiles=1))
                unwritten = torch.full((cross_blocks,), -1, dtype=torch.int32)
                model.text.fill_cross(vision_tokens, unwritten, cache)
                model.text.prefill(torch.zeros(block_size, dtype=torch.int64), 0, block_size,
                                   torch.full((1,), -1, dtype=torch.int32), torch.zeros_like(unwritten),
                                   CrossAttentionMask(0, args.patches, self.max_cross_attn_tokens), cache)
