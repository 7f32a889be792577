"""Gemma 3's vision tower and projector (heads of 32, and of 48 zero-padded to 64), prefill (a two-image row and a
text-only row, longer than the sliding window) and decode on the mock n150, and tensor-parallel on a mock n300: the
real ttnn validates every call (values read back are zeros there, so only shapes are checked)."""

import pytest
import torch

from tests.models import board_runs, image_text_on_mock
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration
from tt_models.runtime import use
from tt_models.testing.gemma3 import UNTILED_HEADS, VOCAB, processed, prompt, tiny_gemma3
from tt_models.testing.images import random_image

pytestmark = pytest.mark.mock
MAX_BATCH, BLOCK, NUM_BLOCKS, WIDTH = 4, 32, 24, 3


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_n150(mock_device, profile):
    hf = tiny_gemma3()
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), mock_device, MAX_BATCH,
                                                           max_seq_len=WIDTH * BLOCK, optimizations=profile)
    args = model.models[0].text.args
    kv = model.allocate_kv_cache((NUM_BLOCKS, args.n_kv_heads, BLOCK, args.head_dim), torch.bfloat16, args.n_layers)
    model.warmup_model_prefill(kv_cache=kv)
    model.warmup_model_decode(kv_cache=kv, max_batch_size=MAX_BATCH, num_blocks=WIDTH)
    pixel_values = processed([random_image(80, 50, seed=0), random_image(40, 60, seed=1)])
    image_prompt = prompt([[5, 6], [7, 8], [9]], 2)
    tokens = torch.full((2, len(image_prompt)), 7)
    tokens[0] = torch.tensor(image_prompt)
    logits = model.prefill_forward(
        tokens=tokens, page_table=torch.tensor([[5, 9, 2], [1, 3, 4]]), kv_cache=kv,
        prompt_lens=[len(image_prompt), 40], start_pos=[0, 0], pixel_values=[pixel_values, None],
        empty_slots=[0, MAX_BATCH - 1])
    decoded = model.decode_forward(
        tokens=torch.ones(MAX_BATCH, 1, dtype=torch.int32), start_pos=torch.tensor([len(image_prompt), -1, -1, 40]),
        page_table=torch.tensor([[5, 9, 2], [0, 0, 0], [0, 0, 0], [1, 3, 4]], dtype=torch.int32), kv_cache=kv,
        enable_trace=True)  # eager on the mock device
    assert (tuple(logits.shape), tuple(decoded.shape)) == ((2, 1, VOCAB), (MAX_BATCH, 1, VOCAB))


def test_untiled_vision_heads_n150(mock_device):
    hf = tiny_gemma3(**UNTILED_HEADS)
    model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), mock_device, MAX_BATCH,
                                                           max_seq_len=WIDTH * BLOCK, optimizations="performance")
    with use(mock_device):
        tokens = model.models[0].image_tokens(processed([random_image(80, 50, seed=0)])[0][0])
        assert tuple(tokens.shape) == (1, 1, 16, 128)


def test_tensor_parallel_on_a_mesh():
    """A mock n300 (1x2): one replica with both towers tensor-parallel over the two chips, and two replicas
    (tt_data_parallel=2), in both profiles; the smallest dims that split (:mod:`tests.models.image_text_on_mock`)."""
    cases = board_runs.cases("gemma3")
    stdout = board_runs.run_on_board(image_text_on_mock.__name__, "n300", cases)
    for case in cases:
        assert f"ok {case} {image_text_on_mock.SHAPES}" in stdout
