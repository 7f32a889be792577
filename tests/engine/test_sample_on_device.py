"""``sample_on_device``: decode steps of plain greedy sequences take the device's tokens (the generators' TT vLLM
``sampling_params`` path) instead of sampling the logits on the host. The tokens must be the host sampler's, with
async decode (its steady steps feeding the sampled tokens back on the device) and with data-parallel replicas too, on
the real model classes (host backend, tiny random Llama and BART); a step with a sequence the device cannot sample
(logprobs) samples on the host."""

from __future__ import annotations

import pytest
import torch

from tests.engine.paged_hash_model import PagedHashModel, checkpoint
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams
from tt_models.testing.llama import tiny_model
from tt_models.testing.seq2seq import tiny_seq2seq

pytestmark = pytest.mark.slow
TOKENS = 12


@pytest.fixture(scope="module", params=["llama", "bart"])
def model(request, tmp_path_factory):
    hf = tiny_model("llama-gqa") if request.param == "llama" else tiny_seq2seq("bart")
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    g = torch.Generator().manual_seed(5)
    prompts = [{"prompt_token_ids": torch.randint(3, 300, (n,), generator=g).tolist()} for n in (3, 20, 41, 70)]
    return load_hf_checkpoint(path), prompts


def run(checkpoint, prompts, *, logprobs_for: int | None = None, **config) -> tuple[list[list[int]], int, int]:
    """Greedy tokens per prompt, how many decode steps the device sampled, and how many of those took the tokens it
    sampled before (async decode's steady steps, ``reset_batch=False``)."""
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=4, block_size=32, max_model_len=128, **config),
                       backend="host", optimizations="accuracy")
    on_device = 0
    decode_forward = engine.runner.model.decode_forward

    def counted(**kwargs):
        nonlocal on_device
        on_device += kwargs.get("sampling_params") is not None
        return decode_forward(**kwargs)

    engine.runner.model.decode_forward = counted
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True,
                                                          logprobs=1 if i == logprobs_for else None))
    outputs = {}
    while engine.has_unfinished_requests():
        outputs.update({o.request_id: o.outputs[0].token_ids for o in engine.step() if o.finished})
    for kv in engine.scheduler.kvs:
        assert kv.num_free_blocks == kv.num_blocks
    fed = engine.runner.model.feedback.steps
    engine.close()
    return [outputs[str(i)] for i in range(len(prompts))], on_device, fed


@pytest.mark.parametrize("config", [{}, {"async_decode": True}, {"data_parallel_size": 2}],
                         ids=["sync", "async", "2-replicas"])
def test_device_tokens_equal_host_sampling(model, config):
    checkpoint, prompts = model
    host, host_steps, _ = run(checkpoint, prompts, **config)
    device, device_steps, fed = run(checkpoint, prompts, sample_on_device=True, **config)
    assert host_steps == 0 and device_steps >= TOKENS - 1
    assert (fed >= TOKENS - 2) if config.get("async_decode") else fed == 0
    assert device == host
    assert all(len(tokens) == TOKENS for tokens in device)


def test_a_step_with_logprobs_samples_on_the_host(model):
    checkpoint, prompts = model
    host, _, _ = run(checkpoint, prompts, logprobs_for=1)
    device, device_steps, _ = run(checkpoint, prompts, logprobs_for=1, sample_on_device=True)
    assert device == host
    assert device_steps == 0  # request 1 (logprobs) decodes in every step, beside the others


def test_a_model_without_device_sampling_is_refused():
    config = EngineConfig(max_num_seqs=4, block_size=32, max_model_len=64, sample_on_device=True)
    with pytest.raises(ValueError, match="supports_sample_on_device"):
        LLMEngine(checkpoint(False), config, backend="host", generator=PagedHashModel(4, False))
