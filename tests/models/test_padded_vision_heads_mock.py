"""The Qwen vision towers at their real checkpoints' widths on the mock n150, one block each: Qwen2.5-VL's 1280 / 16
heads of 80 and Qwen3-VL's 1152 / 16 heads of 72, zero-padded to 96 (:mod:`tt_models.tt.encoder_attention`). The
real ttnn validates every call, the rotary's and SDPA's on the padded heads included (values read back are zeros
there, so only shapes are checked). Their numbers: ``test_padded_vision_heads.py``."""

import pytest

from tt_models.models.qwen2_5_vl import vision as qwen2_5_vision
from tt_models.models.qwen3_vl import vision as qwen3_vision
from tt_models.runtime import use
from tt_models.testing import qwen2_5_vl, qwen3_vl
from tt_models.testing.images import random_image
from tt_models.tt.model_config import Precision

pytestmark = pytest.mark.mock

# name -> (the family's testing and vision modules, the real vision config's widths with one block).
REAL_WIDTHS = {
    "qwen2.5-vl-1280/16": (qwen2_5_vl, qwen2_5_vision, qwen2_5_vl.tiny_qwen2_5_vl,
                           dict(hidden_size=1280, num_heads=16, intermediate_size=3420, depth=1,
                                fullatt_block_indexes=[0])),
    "qwen3-vl-1152/16": (qwen3_vl, qwen3_vision, qwen3_vl.tiny_qwen3_vl,
                         dict(hidden_size=1152, num_heads=16, intermediate_size=4304, depth=1,
                              deepstack_visual_indexes=[0])),
}


@pytest.mark.parametrize("tower", REAL_WIDTHS)
def test_tower_at_real_width_n150(tower, mock_device):
    testing, vision, tiny, widths = REAL_WIDTHS[tower]
    hf = tiny(**widths)
    (pixel_values,), (grid,) = testing.processed([random_image(200, 120, seed=0)])
    with use(mock_device):
        model = vision.VisionTower(vision.VisionArgs.from_hf(hf.config.vision_config), hf.state_dict(),
                                   "model.visual.", mock_device, Precision.uniform("performance"))
        outs = model.forward(pixel_values, tuple(grid.tolist()))
    tokens = int(grid.prod()) // 4  # 2 x 2 merge
    out_dim = hf.config.vision_config.out_hidden_size
    shapes = [tuple(o.shape) for o in (outs if isinstance(outs, list) else [outs])]
    assert shapes == [(1, 1, tokens, out_dim)] * (1 + len(widths.get("deepstack_visual_indexes", [])))
