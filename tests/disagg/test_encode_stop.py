"""An encode instance that ends announced requests, or stops, tells its prefill-decode peers through the broker: they
free what they hold for those requests at once (reserved blocks, announcements waiting for room), not after their
transfer timeout, and log each request's id with the reason. A real Redis server; tiny random BART engines."""

from __future__ import annotations

import logging
import time

import pytest

from tt_models import SamplingParams
from tt_models.disagg.broker import Broker
from tt_models.disagg.encode_engine import EncodeEngine, Stage
from tt_models.disagg.prefill_decode import attach_encoder_inbox
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.testing.seq2seq import save_tiny_bart

# 300+ encoder tokens each, all alike: in the smallest pool (17 blocks) three outputs fit beside one request's self
# blocks, and the fourth fits where one of them was.
LONG = [" ".join(["alpha"] * 320)] * 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=4)
CONFIG = EngineConfig(max_num_seqs=8, max_model_len=64)
TRANSFER_TIMEOUT = 600.0  # so long that nothing here is freed by it
PROMPT_BOUND_S = 5.0  # a withdrawal takes effect within this (loopback Redis, a loaded machine)


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    return str(save_tiny_bart(tmp_path_factory.mktemp("bart")))


def wait_for(condition, engine: LLMEngine) -> float:
    """Service ``engine`` until ``condition()``; the seconds it took."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < PROMPT_BOUND_S, "timed out"
        engine.service()
        time.sleep(0.01)
    return time.monotonic() - start


def test_withdrawn_and_stopping_encode_requests_free_the_peers_blocks_at_once(bart, redis_server, caplog):
    caplog.set_level(logging.WARNING, logger="tt_models.disagg")
    decoder = LLMEngine.from_model(bart, EngineConfig(max_num_seqs=8, max_model_len=64, num_kv_blocks=17),
                                   backend="host", optimizations="accuracy")
    inbox = attach_encoder_inbox(decoder, Broker(redis_server.url, "P-stop", "bart"), timeout=TRANSFER_TIMEOUT)
    encoder = EncodeEngine.from_model(bart, CONFIG, Broker(redis_server.url, "E-stop", "bart"), backend="host",
                                      optimizations="accuracy", transfer_timeout=TRANSFER_TIMEOUT)
    stopped = False
    try:
        ids = [f"stop-{i}" for i in range(len(LONG))]
        for request_id, prompt in zip(ids, LONG):
            encoder.add_request(request_id, prompt, GREEDY, target="P-stop")
        while encoder.waiting:
            encoder.step()  # encoded and announced; the allocation notices are left unread
        wait_for(lambda: len(inbox.reserved) == 3 and len(inbox.pending) == 1, decoder)

        # A request aborted on the encode instance (its client left): its blocks are free at once, and the
        # announcement that waited for room gets them.
        encoder.abort_request(ids[0])
        wait_for(lambda: ids[0] not in inbox.reserved and ids[3] in inbox.reserved, decoder)
        assert inbox.stats.withdrawn == 1

        # The encode instance stops with requests in flight: everything it announced is dropped.
        assert {r.stage for r in encoder.requests.values()} == {Stage.AWAITING_ALLOCATION}
        encoder.close()
        stopped = True
        wait_for(lambda: not inbox.reserved and not inbox.pending, decoder)
        assert decoder.scheduler.kv.num_free_blocks == 17 and inbox.stats.withdrawn == 4
        assert inbox.stats.expired == 0
        messages = [r.getMessage() for r in caplog.records]
        assert "encode instance 'E-stop' stops: encode instance 'E-stop' is stopping" in messages
        for request_id in ids:
            assert any(m.startswith(f"request {request_id}: its encoder output will not come from encode instance "
                                    "'E-stop'") for m in messages), (request_id, messages)
    finally:
        if not stopped:
            encoder.close()
        decoder.close()
