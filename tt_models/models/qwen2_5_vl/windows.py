"""Host-side bookkeeping of one image in Qwen2.5-VL's vision tower, as HF (``vision_utils``) and tt-metal's
preprocessing compute it: the window order of its patches, which patches attend which, and their 2-D positions.

HF's processor lays out the patches in ``2 x 2`` merge units (the four patches one output token merges are
consecutive). The tower reorders whole merge units window by window (``window_size`` pixels square), so that the
window-attention layers attend contiguous runs (``cu_window_seqlens``) and the merger still sees each unit's four
patches together; the output tokens are put back in the processor's order at the end (``argsort(window_index)``).
Here the runs become an additive block-diagonal mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MASKED = torch.finfo(torch.bfloat16).min  # as Mllama's vision masks: exp() of it is 0 in every kernel


@dataclass(frozen=True)
class ImageLayout:
    grid: tuple[int, int, int]  # (t, h, w) in patches
    order: torch.Tensor  # [patches]: the processor's patch at each position of the windowed sequence
    unit_order: torch.Tensor  # [tokens]: HF's window_index (the merge unit at each windowed unit position)
    window: torch.Tensor  # [patches]: window id of each windowed position
    frame: torch.Tensor  # [patches]: temporal frame of each windowed position (full attention stays within one)
    positions: torch.Tensor  # [patches, 2]: (row, column) of each windowed position's patch, the 2-D rotary's

    @property
    def patches(self) -> int:
        return len(self.order)

    @property
    def tokens(self) -> int:
        return len(self.unit_order)

    @property
    def restore(self) -> torch.Tensor:
        """For each output token in the processor's order, its row of the windowed merger output."""
        return torch.argsort(self.unit_order)

    @classmethod
    def of(cls, grid: tuple[int, int, int], *, merge: int, window_units: int) -> "ImageLayout":
        """``window_units``: a window's side in merge units (``window_size // merge // patch_size``)."""
        t, h, w = grid
        if h % merge or w % merge:
            raise ValueError(f"image grid {grid}: height and width must be multiples of spatial_merge_size {merge}")
        units_h, units_w = h // merge, w // merge
        index = torch.arange(t * units_h * units_w).reshape(t, units_h, units_w)
        pad_h, pad_w = -units_h % window_units, -units_w % window_units
        windows_h, windows_w = (units_h + pad_h) // window_units, (units_w + pad_w) // window_units
        padded = torch.nn.functional.pad(index, (0, pad_w, 0, pad_h), value=-1)
        padded = padded.reshape(t, windows_h, window_units, windows_w, window_units).permute(0, 1, 3, 2, 4)
        padded = padded.reshape(t * windows_h * windows_w, window_units * window_units)
        real = padded >= 0
        unit_order = padded[real]
        window_of_unit = torch.arange(len(padded))[:, None].expand_as(padded)[real]
        unit = merge * merge
        order = (unit_order[:, None] * unit + torch.arange(unit)).reshape(-1)
        # Each patch's (row, column) in the processor's order: merge units row-major, patches within one row-major.
        rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        blocks = (units_h, merge, units_w, merge)
        rc = torch.stack([rows.reshape(blocks).transpose(1, 2).reshape(-1),
                          cols.reshape(blocks).transpose(1, 2).reshape(-1)], dim=-1).repeat(t, 1)
        return cls(grid=(t, h, w), order=order, unit_order=unit_order,
                   window=window_of_unit.repeat_interleave(unit), frame=order // (h * w), positions=rc[order])

    def mask(self, groups: torch.Tensor) -> torch.Tensor | None:
        """The additive mask ``[1, 1, S, S]`` keeping attention within equal ``groups``; None when all are one."""
        if bool((groups == groups[0]).all()):
            return None
        mask = torch.zeros(len(groups), len(groups))
        mask[groups[:, None] != groups[None, :]] = MASKED
        return mask[None, None]
