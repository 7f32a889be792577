"""tt_transformers' sharded decode configs (issue 15): what they are per board, the host backend computing the same
logits as the interleaved path, invalid configs rejected by the real ttnn on the mock device (and by the host
backend with it), and every family decoding on a mock Blackhole p150.

The n150 and n300 (1x2 mesh, ``tt_data_parallel`` 1 and 2) runs are the families' own mock tests
(``test_llama_mock``, ``test_seq2seq_mock``, ``test_mllama_mock``): their decode runs these configs.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.models.families_on_mock import SEQ2SEQ
from tests.models.seq2seq_on_mock import expected
from tests.models.test_llama_mock import SHAPES as LLAMA_SHAPES
from tests.models.test_mllama_mock import EXPECTED as MLLAMA_SHAPES
from tt_models.models.llama.generator import LlamaForCausalLM
from tt_models.models.llama.model import LlamaModel
from tt_models.runtime import host, ttnn, use
from tt_models.testing.llama import tiny_model
from tt_models.tt.decode_configs import Board, DecodeConfigs, DramShardedMatmul

ROOT = Path(__file__).resolve().parents[2]
LLAMA_8B = dict(dim=4096, hidden_dim=14336, n_heads=32, n_kv_heads=8, head_dim=128)
TINY = dict(dim=128, hidden_dim=256, n_heads=4, n_kv_heads=2, head_dim=32)
BOARDS = {"n150": (host.Arch.WORMHOLE_B0, host.CoreCoord(8, 8)), "p150": (host.Arch.BLACKHOLE, host.CoreCoord(13, 10))}


def _summary(board: str, dims: dict, vocab: int) -> dict:
    """Per matmul: (activation cores, activation shard width, in0_block_w, per_core_N, DRAM shard width); the
    residual's shard; the LM head's grid, matmul count and first matmul's (per_core_N, DRAM shard width), for
    bfloat8_b weights and float32 logits."""
    device = host.MeshDevice(host.MeshShape(1, 1), *BOARDS[board])
    with use(device):
        configs = DecodeConfigs.sharded(device, **dims)
        out = {"residual": configs.residual.shard_spec.shape}
        for name in ("qkv", "wo", "mlp_in", "mlp_out"):
            layout = getattr(configs, name)
            config = layout.decode_program_config()
            out[name] = (layout.cores, layout.k // layout.cores, config.in0_block_w, config.per_core_N,
                         layout.weight_memory_config().shard_spec.shape[1])
        splits = configs.lm_head_splits(vocab, ttnn.bfloat8_b, ttnn.float32)
        first = splits[0][2]
        out["lm_head"] = ((configs.lm_head_grid.x, configs.lm_head_grid.y), len(splits),
                          first.decode_program_config().per_core_N, first.weight_memory_config().shard_spec.shape[1])
    return out


@pytest.mark.parametrize("board, dims, vocab, expected", [
    # Llama 3.1 8B on Wormhole: a 8x4 residual grid, 64-core MLP grids, 12 DRAM banks; the LM head in 6 matmuls of
    # 25344 columns (tt_transformers' 3 of 42752 with its bfloat8_b logits; float32 logits need twice the L1).
    ("n150", LLAMA_8B, 128256, {"residual": [32, 128], "qkv": (32, 128, 4, 6, 512), "wo": (32, 128, 4, 4, 352),
                                "mlp_in": (64, 64, 2, 7, 1216), "mlp_out": (64, 224, 7, 2, 352),
                                "lm_head": ((8, 8), 6, 13, 2112)}),
    # The same grids on Blackhole (configs stay within 8x8), 8 DRAM banks, LM head matmuls of 16032 columns.
    ("p150", LLAMA_8B, 128256, {"residual": [32, 128], "qkv": (32, 128, 4, 6, 768), "wo": (32, 128, 4, 4, 512),
                                "mlp_in": (64, 64, 2, 7, 1792), "mlp_out": (64, 224, 7, 2, 512),
                                "lm_head": ((8, 8), 8, 8, 2016)}),
    # The tiny test models: 4 tiles of dim on 4 cores; N not a multiple of the cores still covered (per_core_N
    # rounds up), one tile per DRAM bank.
    ("n150", TINY, 320, {"residual": [32, 32], "qkv": (4, 32, 1, 2, 32), "wo": (4, 32, 1, 1, 32),
                         "mlp_in": (4, 32, 1, 2, 32), "mlp_out": (4, 64, 2, 1, 32), "lm_head": ((4, 1), 1, 3, 32)}),
])
def test_configs_per_board(board, dims, vocab, expected):
    assert _summary(board, dims, vocab) == expected


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-bias"])
def test_host_sharded_decode_is_bit_identical_to_interleaved(host_device, name):
    """Prefill, traced decode (captured, then replayed) and eager decode give the same logits bit for bit: the
    sharding is layout only, and the host backend computes it so. Each layout runs twice on fresh caches: three
    traced steps then an eager one (reading what the trace wrote), and eager steps only, the reference of all."""
    hf = tiny_model(name)
    tokens = torch.randint(0, hf.config.vocab_size, (2, 45), generator=torch.Generator().manual_seed(0))
    page_table = torch.tensor([[3, 1, 9, 9], [4, 5, 6, 2]], dtype=torch.int32)
    decode_table = torch.tensor([[3, 1, 0, 0], [0] * 4, [0] * 4, [4, 5, 6, 0]], dtype=torch.int32)
    outputs = {}
    for sharded, traced in ((True, True), (False, True), (True, False), (False, False)):
        model = LlamaForCausalLM.build_replicas(host_device, 4, 1, lambda device, users: LlamaModel(
            hf.config, hf.state_dict(), device, max_batch_size=users, max_seq_len=128, optimizations="performance",
            sharded_decode=sharded))
        wqkv = model.models[0].layers[0].attention.wqkv.weight.memory_config()
        assert wqkv.is_sharded() == sharded and wqkv.buffer_type == ttnn.BufferType.DRAM
        kv = model.allocate_kv_cache((16, 2, 32, 32), torch.bfloat16, 2)
        steps = [model.prefill_forward(tokens=tokens, page_table=page_table, kv_cache=kv,
                                       prompt_lens=np.array([40, 45]))]
        for step, trace in enumerate((traced, traced, traced, False)):
            steps.append(model.decode_forward(
                tokens=torch.full((4, 1), 7 + step), start_pos=torch.tensor([40 + step, -1, -1, 45 + step]),
                page_table=decode_table, kv_cache=kv, enable_trace=trace))
        assert model.traces.executions == 3 * traced and len(model.traces.captures) == traced
        model.release_traces()
        outputs[sharded, traced] = steps
    reference = outputs[False, False]  # interleaved, eager only
    for key, steps in outputs.items():
        for step, (got, want) in enumerate(zip(steps, reference)):
            assert torch.equal(got, want), f"(sharded, traced) = {key}, step {step}"


@pytest.mark.parametrize("backend", [pytest.param("mock", marks=pytest.mark.mock), "host"])
def test_invalid_sharded_configs_are_rejected(request, backend):
    """The real ttnn's validation on the mock device rejects what would be wrong on silicon, and the host backend
    raises the same errors; what ttnn 0.81.1 runs silently (a per_core_N too small for N), the explicit check of
    the decode configs rejects."""
    device = request.getfixturevalue(f"{backend}_device")
    with use(device):
        layout = DramShardedMatmul.on(ttnn.CoreGrid(x=4, y=1), 128, 256, Board.of(device))

        def tensor(shape, memory_config, dtype=ttnn.bfloat16):
            return ttnn.from_torch(torch.randn(shape), dtype=dtype, layout=ttnn.TILE_LAYOUT, device=device,
                                   memory_config=memory_config)

        x = tensor((1, 1, 32, 128), layout.input_memory_config())
        w = tensor((1, 1, 128, 256), layout.weight_memory_config(), ttnn.bfloat8_b)
        sharded_out = ttnn.L1_WIDTH_SHARDED_MEMORY_CONFIG
        out = ttnn.linear(x, w, program_config=layout.decode_program_config(), memory_config=sharded_out)
        assert tuple(out.shape) == (1, 1, 32, 256)

        def dram_sharded(in0_block_w, per_core_n=2):
            return ttnn.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(in0_block_w=in0_block_w, per_core_M=1,
                                                                             per_core_N=per_core_n)

        with pytest.raises(RuntimeError, match="in0_block_w"):  # K's 4 tiles in blocks of 3
            ttnn.linear(x, w, program_config=dram_sharded(3), memory_config=sharded_out)
        with pytest.raises(RuntimeError, match="WIDTH_SHARDED"):  # the weight DRAM-interleaved
            ttnn.linear(x, tensor((1, 1, 128, 256), None, ttnn.bfloat8_b), program_config=dram_sharded(1),
                        memory_config=sharded_out)
        with pytest.raises(RuntimeError, match="sharded"):  # an interleaved output
            ttnn.linear(x, w, program_config=dram_sharded(1), memory_config=ttnn.DRAM_MEMORY_CONFIG)
        with pytest.raises(RuntimeError, match="Invalid shard grid"):  # more cores than the 8-wide worker grid
            tensor((1, 1, 32, 9 * 32), ttnn.create_sharded_memory_config(
                (32, 32), ttnn.CoreGrid(x=9, y=1), ttnn.ShardStrategy.WIDTH, ttnn.ShardOrientation.ROW_MAJOR,
                use_height_and_width_as_shard_shape=True))
        weight = ttnn.from_torch(torch.ones(1, 1, 4, 32), dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT,
                                 device=device)
        norm = ttnn.LayerNormShardedMultiCoreProgramConfig(compute_with_storage_grid_size=ttnn.CoreCoord(4, 1),
                                                           subblock_w=1, block_h=1, block_w=2, inplace=False)
        with pytest.raises(RuntimeError, match="block_w"):  # a shard of one tile read as two
            ttnn.rms_norm(x, epsilon=1e-5, weight=weight, program_config=norm, memory_config=x.memory_config())

        silent = dram_sharded(1, per_core_n=1)  # 4 cores x 1 tile for N's 8 tiles
        ttnn.linear(x, w, program_config=silent, memory_config=sharded_out)
        with pytest.raises(ValueError, match="per_core_N=1 on 4 cores covers less than N's 8 tiles"):
            layout.check(silent)
        with pytest.raises(ValueError, match="K=128 is not whole tiles on each of 3 cores"):
            DramShardedMatmul.on(ttnn.CoreGrid(x=3, y=1), 128, 256, Board.of(device)).check()


@pytest.mark.mock
def test_every_family_decodes_on_a_mock_p150(tmp_path):
    """Blackhole's 13x10 worker grid and 8 DRAM banks: the Llama family (Qwen2, q/k/v bias), Whisper, BART and
    Mllama run their prefill and (traced, eager on the mock) decode paths in one process."""
    tiny_model("qwen2-bias").save_pretrained(tmp_path)
    command = [sys.executable, "-m", "tests.models.families_on_mock", "p150", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ok llama {LLAMA_SHAPES}" in result.stdout
    for name in SEQ2SEQ:
        assert f"ok {name} {expected(name)}" in result.stdout
    assert f"ok mllama {MLLAMA_SHAPES}" in result.stdout
