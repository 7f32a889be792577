"""Which vision tokens each text row of a Mllama request attends (HF's cross-attention masks, compactly).

With one image per request, HF's masks reduce to three cases per text row:

- at or after the ``<|image|>`` token: the image's real tiles, the first ``num_tiles * patches`` vision tokens
  (padding tiles masked); the MLP branch of each cross-attention layer applies;
- before it (HF's "fully masked" row, whose mask HF zeroes): every vision token, padding tiles included, and the
  MLP branch is masked out (``full_text_row_masked_out_mask = 0``);
- a text-only request: no cross-attention at all (HF skips the layers).

Each visible set is a prefix of the request's vision tokens, so the model reads it with the causal paged decode
SDPA at ``cur_pos = visible - 1``: no ``[rows, heads, tokens]`` mask tensor is built or copied per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CrossAttentionMask:
    """One image request's mask: ``cross_attention_masks[i]`` of the contract, kept by the caller per request."""

    image_position: int  # of the request's <|image|> token
    image_tokens: int  # vision tokens of the image's real tiles
    vision_tokens: int  # all vision tokens in its cross blocks

    def visible(self, positions: torch.Tensor) -> torch.Tensor:
        """Vision tokens attended by the text rows at ``positions``."""
        return torch.where(positions >= self.image_position, self.image_tokens, self.vision_tokens)

    def text_rows(self, positions: torch.Tensor) -> torch.Tensor:
        """HF's ``full_text_row_masked_out_mask`` of the rows at ``positions`` (1: the row sees the image)."""
        return (positions >= self.image_position).float()


def decode_text_row(mask: CrossAttentionMask | None) -> float:
    """``full_text_row_masked_out_mask[i]`` of the contract: the value for the rows decode adds after the prompt."""
    return 0.0 if mask is None else 1.0
