"""Encoder disaggregation of Llama 3.2 Vision, in one process on a real Redis server: the vision encoder runs on an
encode engine, its vision tokens travel through the broker into the prefill-decode engine's cross blocks, and the
greedy outputs equal an engine that runs its vision encoder itself (tiny random checkpoint, host backend)."""

from __future__ import annotations

import pytest

from tests.disagg.test_transfer import assert_all_free, run
from tt_models import SamplingParams
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.disagg.broker import Broker
from tt_models.disagg.encode_engine import EncodeEngine
from tt_models.disagg.prefill_decode import attach_encoder_inbox
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.testing.images import random_image
from tt_models.testing.mllama import IMAGE_TOKEN, write_tiny_mllama_checkpoint

CONFIG = EngineConfig(max_num_seqs=4, block_size=32, max_model_len=96)
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
# Images of 1, 2 and 4 tiles (their masks differ), and a text-only request, which needs no encode instance.
REQUESTS = [(f"image-{i}", {"prompt_token_ids": [1, IMAGE_TOKEN, *range(20 + i, 31 + 2 * i)],
                            "multi_modal_data": {"image": random_image(*size, seed=i)}}, GREEDY)
            for i, size in enumerate([(60, 40), (200, 90), (300, 300)])]
REQUESTS.append(("text-only", {"prompt_token_ids": [1, *range(40, 52)]}, GREEDY))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return load_hf_checkpoint(write_tiny_mllama_checkpoint(tmp_path_factory.mktemp("mllama")))


def test_vision_tokens_from_an_encode_instance_give_the_same_outputs(checkpoint, redis_server):
    reference = LLMEngine(checkpoint, CONFIG, backend="host", optimizations="accuracy")
    expected = run_alone(reference)
    reference.close()
    encoder = EncodeEngine(checkpoint, CONFIG, Broker(redis_server.url, "E-vision", "mllama"), backend="host",
                           optimizations="accuracy")
    decoder = LLMEngine(checkpoint, CONFIG, backend="host", optimizations="accuracy")
    inbox = attach_encoder_inbox(decoder, Broker(redis_server.url, "P-vision", "mllama"))
    try:
        outputs = run(encoder, decoder, REQUESTS)
        assert {k: [s.token_ids for s in o.outputs] for k, o in outputs.items()} == expected
        assert inbox.stats.claimed == 3 and encoder.stats["encoded"] == 3  # the images; the text went straight on
        assert_all_free(decoder)
    finally:
        encoder.close()
        decoder.close()


def run_alone(engine: LLMEngine) -> dict[str, list[list[int]]]:
    for request in REQUESTS:
        engine.add_request(*request)
    finished = {}
    while engine.has_unfinished_requests():
        finished.update((o.request_id, [s.token_ids for s in o.outputs]) for o in engine.step() if o.finished)
    return finished
