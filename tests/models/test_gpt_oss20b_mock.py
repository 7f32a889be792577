"""One decoder layer and the LM head of GPT-OSS-20B at its real dims (hidden 2880, 64 query heads over 8 KV heads of
64 with their sinks, a sliding layer of window 128, YaRN; 32 experts of width 2880, top 4, with their biases;
vocabulary 201088) on the mock device, in both profiles: a 128-token prefill and a 32-user decode step at position
128 (past the window) on the mock n300 (the layer tensor-parallel: 32 heads, 16 experts a chip), and on one chip: the
mock p150, where 20B fits (``docs/tensor-parallel.md``, "What fits where"), and the mock n150 (the layer fits its
DRAM; the whole model does not). On one chip decode holds 64 query heads, each user's two tiles of head rows on its
core (``tt_models.tt.attention``). The real ttnn validates every op at full size (the router's 32-expert logits and
top-4 over a 92160-wide stacked expert MLP, the sinks of 64 heads, the 2880-wide norms and projections), which the
tiny configs cannot reach; values read back are zeros on the mock device, so only shapes are checked.

``python -m tests.models.test_gpt_oss20b_mock p150 gpt-oss-20b-layer:1:PROFILE`` runs it (one mock board per process,
see :mod:`tests.models.board_runs`); the random state dict (HF's names and shapes, from the config on the meta device)
is built in memory. Measured: 30-45 s and 5.8 GB peak RSS a process and profile, dominated by ttnn's host conversion
of the weights; so it is in the extended group.
"""

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, GptOssConfig

from tests.models import board_runs
from tt_models.models.llama.generator import GptOssForCausalLM
from tt_models.tt.model_config import PROFILES

pytestmark = [pytest.mark.mock, pytest.mark.heavy]
LAYER, BATCH, PROMPT, BLOCK = "gpt-oss-20b-layer", 32, 128, 32
# openai/gpt-oss-20b's config (GptOssConfig's defaults are its dims: 24 layers of 32 experts there) cut to one layer;
# the LM head tied to the embedding, which saves a 201088 x 2880 host table (the device holds both, as for 20B).
CONFIG = GptOssConfig(num_hidden_layers=1, num_local_experts=32, num_experts_per_tok=4, tie_word_embeddings=True)


def _random(shape: torch.Size, generator: torch.Generator) -> torch.Tensor:
    """A bf16 tensor of 256 random rows repeated (the mock device drops the values; making 1 G random values would
    take longer than the test); norms ones."""
    if len(shape) == 1:
        return torch.randn(shape, generator=generator, dtype=torch.bfloat16) * 0.02
    rows = math.prod(shape[:-1])
    block = torch.randn(256, shape[-1], generator=generator, dtype=torch.bfloat16) * 0.02
    return block.repeat(-(-rows // 256), 1)[:rows].reshape(shape)


def state_dict() -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        names = {name: p.shape for name, p in AutoModelForCausalLM.from_config(CONFIG).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    return {name: torch.ones(shape) if name.endswith("norm.weight") else _random(shape, g)
            for name, shape in names.items() if name != "lm_head.weight"}


def run(device, name: str, data_parallel: int, profile: str) -> list[tuple[int, ...]]:
    """Prefill one 128-token prompt, then decode 32 users (each at position 128 of its own blocks); the output
    shapes."""
    model = GptOssForCausalLM.from_state_dict(CONFIG, state_dict(), device, BATCH, max_seq_len=2 * PROMPT,
                                              tt_data_parallel=data_parallel, optimizations=profile)
    heads, head_dim = model.models[0].kv_geometry
    blocks = PROMPT // BLOCK + 1  # per user: its prompt and the decoded token
    kv = model.allocate_kv_cache((BATCH * blocks, heads, BLOCK, head_dim), torch.bfloat16, 1)
    page_table = torch.arange(BATCH * blocks, dtype=torch.int32).reshape(BATCH, blocks)
    prefill = model.prefill_forward(tokens=torch.randint(0, CONFIG.vocab_size, (1, PROMPT)),
                                    page_table=page_table[:1], kv_cache=kv, prompt_lens=np.array([PROMPT]))
    decode = model.decode_forward(tokens=torch.ones(BATCH, 1, dtype=torch.int32),
                                  start_pos=torch.full((BATCH,), PROMPT), page_table=page_table, kv_cache=kv)
    return [tuple(prefill.shape), tuple(decode.shape)]


@pytest.mark.slow
@pytest.mark.parametrize("board", ["n300", "p150", "n150"])
def test_a_gpt_oss_20b_layer_on_the_mock_device(board):
    cases = [f"{LAYER}:1:{profile}" for profile in PROFILES]
    stdout = board_runs.run_on_board("tests.models.test_gpt_oss20b_mock", board, cases)
    for case in cases:
        assert f"ok {case} {[(1, 1, CONFIG.vocab_size), (BATCH, 1, CONFIG.vocab_size)]}" in stdout


if __name__ == "__main__":
    board_runs.main(run)
