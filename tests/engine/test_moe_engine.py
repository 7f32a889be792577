"""tt-models' own engine on the mixture-of-experts families (host backend, accuracy profile): ``tt_models.LLM`` on a
checkpoint directory of the tiny Qwen3-MoE and GPT-OSS (:mod:`tt_models.testing.moe`) gives the greedy tokens of
the generator class driven directly as TT vLLM drives it (:func:`tests.models.vllm_driver.greedy_rows`), on one chip
and as two data-parallel replicas on a 1x2 host mesh (a request on each); every KV block is free after.

The class's own tokens are checked against HF's in :mod:`tests.models.moe_cases`; here the engine (scheduler,
pool, input batch, sampler) must add nothing to them.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoConfig

from tests.models.vllm_driver import Request, VllmDriver, greedy_rows
from tt_models import LLM, SamplingParams
from tt_models.models.llama.generator import GptOssForCausalLM, Qwen3MoeForCausalLM
from tt_models.runtime import close_device, open_device
from tt_models.testing.moe import tiny_moe

pytestmark = pytest.mark.slow
GENERATORS = {"qwen3-moe": Qwen3MoeForCausalLM, "gpt-oss": GptOssForCausalLM}
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN, NEW_TOKENS = 4, 32, 24, 128, 16
PROMPT_LENS = (20, 37)


@pytest.fixture(scope="module", params=list(GENERATORS))
def case(request, tmp_path_factory) -> tuple[str, str, list[list[int]]]:
    """A tiny config's checkpoint directory and the prompts: ``(name, path, prompts)``."""
    name = request.param
    path = tmp_path_factory.mktemp(name)
    hf = tiny_moe(name)
    hf.save_pretrained(path)
    g = torch.Generator().manual_seed(3)
    return name, str(path), [torch.randint(3, hf.config.vocab_size, (n,), generator=g).tolist() for n in PROMPT_LENS]


@pytest.fixture(scope="module")
def driven(case) -> list[list[int]]:
    """The class's greedy tokens, driven directly (both requests in one batch)."""
    name, path, prompts = case
    device = open_device("host")
    try:
        return _greedy(GENERATORS[name], path, prompts, device)
    finally:
        close_device(device)


def _greedy(generator: type, path: str, prompts: list[list[int]], device: Any) -> list[list[int]]:
    model = generator.initialize_vllm_model(AutoConfig.from_pretrained(path), device, MAX_BATCH, max_seq_len=MAX_LEN,
                                            optimizations="accuracy")
    heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((NUM_BLOCKS, heads, BLOCK, head_dim), torch.bfloat16, model.models[0].n_layers)
    driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                        width=MAX_LEN // BLOCK)
    requests = [Request(tokens=list(p), prompt_len=len(p)) for p in prompts]
    greedy_rows(driver, requests, (3, 0), NEW_TOKENS)
    return [r.tokens[r.prompt_len:] for r in requests]


@pytest.mark.parametrize("replicas", [1, 2])
def test_llm_gives_the_tokens_of_the_class_driven_directly(case, driven, replicas):
    name, path, prompts = case
    llm = LLM(path, backend="host", optimizations="accuracy", max_num_seqs=MAX_BATCH, block_size=BLOCK,
              max_model_len=MAX_LEN, data_parallel_size=replicas, mesh_shape=(1, replicas))
    try:
        params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
        kvs = llm.llm_engine.scheduler.kvs
        assert len(kvs) == replicas
        assert all(kv.num_free_blocks == kv.num_blocks for kv in kvs)
    finally:
        llm.close()
    assert [list(o.outputs[0].token_ids) for o in outputs] == driven
