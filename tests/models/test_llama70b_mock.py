"""One decoder layer and the LM head of Llama 3.1 70B (hidden 8192, 64 heads over 8 KV heads of 128, MLP 28672,
vocabulary 128256) tensor-parallel on the mock T3K, as tt_transformers runs 70B (TP=8): a 128-token prefill and a
32-user decode step in its default profile, "performance" (bfloat8_b attention, bfloat4_b MLP). The real ttnn
validates every op at full size (per-chip decode configs, the LM head's L1 splits, the 8192-wide prefill norms),
which the tiny configs cannot reach.

``python -m tests.models.test_llama70b_mock t3k NAME:1:PROFILE`` runs it (one mock board per process, see
:mod:`tests.models.board_runs`); the random state dict of one layer is built in memory. Measured, both profiles in one
process: 55-60 s and 9.0 GB peak RSS, dominated by ttnn's host conversion of the weights (the two 128256 x 8192
tables most); so the suite runs the default profile, and ``python -m tests.models.test_llama70b_mock t3k
llama-3.1-70b-layer:1:accuracy`` the other (it passed on 2026-11-27).
"""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig

from tests.models import board_runs
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.tt.model_config import default_profile

pytestmark = [pytest.mark.mock, pytest.mark.heavy]
NAME, BATCH, PROMPT, BLOCK = "llama-3.1-70b-layer", 32, 128, 32
DIM, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 8192, 64, 8, 128, 28672, 128256
# Tied embeddings: the LM head is built from the embedding's host tensor, which saves 2 GB of host memory; the device
# holds both tables, as for 70B's separate head.
CONFIG = LlamaConfig(hidden_size=DIM, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                     intermediate_size=MLP, vocab_size=VOCAB, num_hidden_layers=1, rms_norm_eps=1e-5,
                     rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def _random(rows: int, columns: int, generator: torch.Generator) -> torch.Tensor:
    """A bf16 weight of 256 random rows repeated (the mock device drops the values; making 3 G random values would
    take longer than the test)."""
    block = torch.randn(256, columns, generator=generator, dtype=torch.bfloat16) * 0.02
    return block.repeat(rows // 256, 1)


def state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    layer = "model.layers.0."
    return {"model.embed_tokens.weight": _random(VOCAB, DIM, g), "model.norm.weight": torch.ones(DIM),
            f"{layer}input_layernorm.weight": torch.ones(DIM),
            f"{layer}post_attention_layernorm.weight": torch.ones(DIM),
            f"{layer}self_attn.q_proj.weight": _random(HEADS * HEAD_DIM, DIM, g),
            f"{layer}self_attn.k_proj.weight": _random(KV_HEADS * HEAD_DIM, DIM, g),
            f"{layer}self_attn.v_proj.weight": _random(KV_HEADS * HEAD_DIM, DIM, g),
            f"{layer}self_attn.o_proj.weight": _random(DIM, HEADS * HEAD_DIM, g),
            f"{layer}mlp.gate_proj.weight": _random(MLP, DIM, g), f"{layer}mlp.up_proj.weight": _random(MLP, DIM, g),
            f"{layer}mlp.down_proj.weight": _random(DIM, MLP, g)}


def run(device, name: str, data_parallel: int, profile: str) -> list[tuple[int, ...]]:
    """Prefill one 128-token prompt, then decode 32 users (each at position 128 of its own blocks); output shapes."""
    model = LlamaForCausalLM.from_state_dict(CONFIG, state_dict(), device, BATCH, max_seq_len=2 * PROMPT,
                                             tt_data_parallel=data_parallel, optimizations=profile)
    heads, head_dim = model.models[0].kv_geometry
    assert heads == 1  # 8 KV heads over 8 chips
    blocks = PROMPT // BLOCK + 1  # per user: its prompt and the decoded token
    kv = model.allocate_kv_cache((BATCH * blocks, heads, BLOCK, head_dim), torch.bfloat16, 1)
    page_table = torch.arange(BATCH * blocks, dtype=torch.int32).reshape(BATCH, blocks)
    prefill = model.prefill_forward(tokens=torch.randint(0, VOCAB, (1, PROMPT)), page_table=page_table[:1],
                                    kv_cache=kv, prompt_lens=np.array([PROMPT]))
    decode = model.decode_forward(tokens=torch.ones(BATCH, 1, dtype=torch.int32),
                                  start_pos=torch.full((BATCH,), PROMPT), page_table=page_table, kv_cache=kv)
    return [tuple(prefill.shape), tuple(decode.shape)]


@pytest.mark.slow
def test_a_llama_3_1_70b_layer_on_the_mock_t3k():
    cases = [f"{NAME}:1:{default_profile(CONFIG)}"]
    stdout = board_runs.run_on_board("tests.models.test_llama70b_mock", "t3k", cases)
    for case in cases:
        assert f"ok {case} {[(1, 1, VOCAB), (BATCH, 1, VOCAB)]}" in stdout


if __name__ == "__main__":
    board_runs.main(run)
