"""Text-only Gemma 3 (``Gemma3ForCausalLM``): the image model's text decoder alone. Its numerics against HF are
``test_llama_contract.py``'s ``gemma3-text`` case; here, that it is the very text model of the image class (the same
logits, bit for bit, host backend), and its prefill and decode on mock boards (real ttnn validation)."""

import numpy as np
import pytest
import torch

from tests.models import board_runs
from tests.models.llama_on_mock import run
from tt_models.models.gemma3.generator import Gemma3ForCausalLM, Gemma3ForConditionalGeneration
from tt_models.models.gemma3.text import language_model_state
from tt_models.testing.gemma3 import tiny_gemma3, tiny_gemma3_text
from tt_models.tt.model_config import PROFILES

BLOCK, NUM_BLOCKS, MAX_BATCH = 32, 8, 2
# prefill, decode, raw decode read; device sampling: decode tokens and log-probs, prefill tokens (llama_on_mock.run)
VOCAB = 512
SHAPES = [(2, 1, VOCAB), (4, 1, VOCAB), (4, 1, VOCAB), (4,), (4,), (1,)]


def _logits(model, kv) -> list[torch.Tensor]:
    """A 45-token prompt's prefill (past the 32-token sliding window) and three decode steps."""
    tokens = torch.randint(3, VOCAB - 16, (1, 48), generator=torch.Generator().manual_seed(0))
    page_table = torch.tensor([[0, 1, 0, 0]], dtype=torch.int32)
    out = [model.prefill_forward(tokens=tokens, page_table=page_table, kv_cache=kv, prompt_lens=np.array([45]))[0, 0]]
    for step in range(3):
        out.append(model.decode_forward(tokens=tokens[:, 45 + step:46 + step].repeat(MAX_BATCH, 1),
                                        start_pos=torch.tensor([45 + step, -1]), page_table=page_table.repeat(2, 1),
                                        kv_cache=kv)[0, 0])
    return out


def test_the_text_class_is_the_image_models_text_path(host_device):
    hf = tiny_gemma3()
    image_model = Gemma3ForConditionalGeneration.from_state_dict(hf.config, hf.state_dict(), host_device, MAX_BATCH,
                                                                 max_seq_len=128)
    text_model = Gemma3ForCausalLM.from_state_dict(hf.config.text_config, language_model_state(hf.state_dict()),
                                                   host_device, MAX_BATCH, max_seq_len=128)
    runs = []
    for model in (image_model, text_model):
        heads, head_dim = model.models[0].kv_geometry
        kv = model.allocate_kv_cache((NUM_BLOCKS, heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
        runs.append(_logits(model, kv))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("gemma3-text")
    tiny_gemma3_text().save_pretrained(path)
    return str(path)


@pytest.mark.mock
@pytest.mark.parametrize("optimizations", PROFILES)
def test_n150(mock_device, checkpoint, optimizations):
    assert run(mock_device, checkpoint, 1, optimizations) == SHAPES


@pytest.mark.mock
def test_n300(checkpoint):
    cases = board_runs.cases(checkpoint, "n300")
    stdout = board_runs.run_on_board("tests.models.llama_on_mock", "n300", cases)
    for case in cases:
        assert f"ok {case} {SHAPES}" in stdout
