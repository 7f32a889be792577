"""One replica of Mllama (Llama 3.2 Vision): vision encoder, multi-modal projector and text model."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.mllama.images import ImageInput
from tt_models.models.mllama.text import MllamaText
from tt_models.models.mllama.vision import VisionArgs, VisionEncoder, hf_projector_columns
from tt_models.runtime import ttnn
from tt_models.tt.model_config import Precision
from tt_models.tt.linear import Linear
from tt_models.tt.tensor_parallel import gather


class MllamaModel:
    def __init__(self, hf_config: Any, state: dict[str, torch.Tensor], device: Any, *, max_batch_size: int,
                 max_seq_len: int, optimizations: str | None) -> None:
        self.device = device
        self.vision_args = args = VisionArgs.from_hf(hf_config.vision_config)
        vision_precision = Precision.uniform(optimizations)
        self.vision = VisionEncoder(args, state, "model.vision_model.", device, vision_precision)
        projector = state["model.multi_modal_projector.weight"][:, hf_projector_columns(args)]
        self.projector = Linear(projector, device, vision_precision.attention_weights,
                                bias=state["model.multi_modal_projector.bias"], parallel="column")
        self.text = MllamaText(hf_config.text_config, state, device, max_batch_size=max_batch_size,
                               max_seq_len=max_seq_len, optimizations=optimizations)
        self.n_layers = self.text.n_layers
        self.precision = self.text.precision

    @property
    def vocab_size(self) -> int:
        return self.text.vocab_size

    @property
    def kv_geometry(self) -> tuple[int, int]:
        """``(KV heads, head_dim)`` of one chip's self and cross pools (the text model's)."""
        return self.text.heads.kv_per_chip, self.text.args.head_dim

    def vision_tokens(self, image: ImageInput) -> Any:
        """The image's vision tokens in the text width: ``[1, 1, max_num_tiles * patches, dim]``."""
        states = self.vision.forward(image.pixel_values, image.aspect_ratio_id, image.num_tiles)
        out = self.projector.forward(states)
        ttnn.deallocate(states)
        return gather(out, self.device)  # the cross K/V projections read whole rows
