"""Encoder disaggregation in one process, on a real Redis server: an encode engine and a prefill-decode engine
(tiny random BART, host backend) exchange encoder outputs through the broker, and the decoded outputs equal those
of an engine that runs its encoder itself; backpressure, refusals, timeouts and a broker restart."""

from __future__ import annotations

import time

import pytest
import torch

from tests.disagg.redis_server import RedisServer
from tt_models import SamplingParams
from tt_models.disagg.broker import Broker, Metadata
from tt_models.disagg.encode_engine import EncodeEngine
from tt_models.disagg.prefill_decode import attach_encoder_inbox
from tt_models.disagg.routing import TransferError
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.testing.seq2seq import save_tiny_bart

PROMPTS = ["Hello world", "The quick brown fox", "A longer prompt that spans a few more tokens than the others do",
           "Zebra"]
LONG = [" ".join([p] * (300 // len(p.split()) + 1)) for p in PROMPTS]  # 300+ encoder tokens: 5+ blocks each
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, logprobs=2)
SEEDED = SamplingParams(temperature=0.9, top_k=40, max_tokens=6, seed=3, n=2)
CONFIG = EngineConfig(max_num_seqs=8, max_model_len=64)
TIMEOUT = 3.0  # seconds; generous: a loaded machine steps slowly between the injection and the claim


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    return str(save_tiny_bart(tmp_path_factory.mktemp("bart")))


def load(bart: str, **config) -> LLMEngine:
    return LLMEngine.from_model(bart, EngineConfig(**{**CONFIG.__dict__, **config}), backend="host",
                                optimizations="accuracy")


@pytest.fixture(scope="module")
def reference(bart):
    engine = load(bart)
    outputs = {}
    for params in (GREEDY, SEEDED):
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(f"{id(params)}-{i}", prompt, params)
    for i, prompt in enumerate(LONG):
        engine.add_request(f"long-{i}", prompt, GREEDY)
        while engine.has_unfinished_requests():
            outputs.update((o.request_id, o) for o in engine.step() if o.finished)
    engine.close()
    return outputs


@pytest.fixture(scope="module")
def encoder(bart, redis_server):
    engine = EncodeEngine.from_model(bart, CONFIG, Broker(redis_server.url, "E", "bart"), backend="host",
                                     optimizations="accuracy", transfer_timeout=TIMEOUT)
    yield engine
    engine.close()


def prefill_decode(bart: str, url: str, name: str, **config) -> LLMEngine:
    engine = load(bart, **config)
    attach_encoder_inbox(engine, Broker(url, name, "bart"), timeout=TIMEOUT)
    return engine


@pytest.fixture(scope="module")
def decoder(bart, redis_server):
    engine = prefill_decode(bart, redis_server.url, "P")
    yield engine
    engine.close()


def run(encoder: EncodeEngine, decoder: LLMEngine, requests: list[tuple[str, str, SamplingParams]],
        deadline: float = 60) -> dict:
    """The proxy's flow: each request to the encode engine, then, once it ended there, to the prefill-decode engine;
    both engines stepped until every request ended. Returns the final outputs (encode failures included)."""
    for request_id, prompt, params in requests:
        encoder.add_request(request_id, prompt, params, target=decoder.encoder_inbox.broker.instance)
    prompts = {request_id: (prompt, params) for request_id, prompt, params in requests}
    finished: dict = {}
    stop = time.monotonic() + deadline
    while len(finished) < len(requests):
        assert time.monotonic() < stop, f"requests did not finish: {sorted(set(prompts) - set(finished))}"
        for output in encoder.step() if encoder.has_unfinished_requests() else encoder.service():
            if output.error is not None:
                finished[output.request_id] = output
            else:
                decoder.add_request(output.request_id, *prompts[output.request_id])
        for output in decoder.step() if decoder.has_unfinished_requests() else decoder.service():
            if output.finished:
                finished[output.request_id] = output
        time.sleep(0.002)
    return finished


def assert_all_free(decoder: LLMEngine) -> None:
    decoder.service()
    assert decoder.scheduler.kv.num_free_blocks == decoder.config.num_kv_blocks
    assert not decoder.encoder_inbox.reserved and not decoder.encoder_inbox.pending


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy-logprobs", "seeded-n2"])
def test_outputs_equal_an_engine_that_encodes_itself(encoder, decoder, reference, params):
    claimed = decoder.encoder_inbox.stats.claimed
    outputs = run(encoder, decoder, [(f"{id(params)}-{i}", p, params) for i, p in enumerate(PROMPTS)])
    for request_id, output in outputs.items():
        expected = reference[request_id]
        assert [s.token_ids for s in output.outputs] == [s.token_ids for s in expected.outputs]
        assert [s.logprobs for s in output.outputs] == [s.logprobs for s in expected.outputs]
    assert decoder.encoder_inbox.stats.claimed - claimed == len(PROMPTS)  # no encoder ran on the decoder
    assert_all_free(decoder)


def test_a_full_pool_holds_encoder_outputs_back_and_loses_none(bart, redis_server, encoder, reference):
    # The smallest pool the engine takes (one request of 1024 encoder and 64 decoder tokens: 17 blocks) holds
    # three of these encoder outputs beside one request's self blocks: the others wait for room.
    small = prefill_decode(bart, redis_server.url, "P-small", num_kv_blocks=17)
    try:
        requests = [(f"long-{i}", p, GREEDY) for i, p in enumerate(LONG)]
        outputs = run(encoder, small, requests)
        assert small.encoder_inbox.stats.waited >= 1  # announcements waited for room
        assert len(outputs) == len(LONG) and not any(o.error for o in outputs.values())
        assert [o.outputs[0].token_ids for o in outputs.values()] == \
            [reference[o.request_id].outputs[0].token_ids for o in outputs.values()]
        assert_all_free(small)
    finally:
        small.close()


def test_a_request_that_encodes_itself_neither_deadlocks_nor_starves_behind_encoder_outputs(bart, encoder,
                                                                                           redis_server):
    """In the smallest pool (17 blocks) these requests run one at a time (11 cross blocks + 1 self block each).
    "late" was encoded for this instance, but its output expired before the request came (a slow proxy): it must
    encode itself and needs a whole request's blocks, while the output of "handed-over" holds 11 of them and its
    request queues behind "late". Then "third" is announced while "late" still waits."""
    prompts = {"late": " ".join(["alpha"] * 700), "handed-over": " ".join(["delta"] * 700),
               "third": " ".join(["echo"] * 700)}  # ~700 tokens each
    plain = load(bart)
    for request_id, prompt in prompts.items():
        plain.add_request(request_id, prompt, GREEDY)
    expected = {}
    while plain.has_unfinished_requests():
        expected.update((o.request_id, o.outputs[0].token_ids) for o in plain.step() if o.finished)
    plain.close()
    small = prefill_decode(bart, redis_server.url, "P-one", num_kv_blocks=17)
    try:
        inbox = small.encoder_inbox
        for request_id in ("late", "handed-over"):
            encoder.add_request(request_id, prompts[request_id], GREEDY, target="P-one")
            stop = time.monotonic() + 20
            while not any(o.request_id == request_id for o in encoder.step() + encoder.service()):
                small.service()
                assert time.monotonic() < stop
            if request_id == "late":
                wait_for(lambda: inbox.stats.expired == 1, small, seconds=3 * TIMEOUT)
        assert inbox.num_unclaimed == 1
        small.add_request("late", prompts["late"], GREEDY)
        small.add_request("handed-over", prompts["handed-over"], GREEDY)  # claims its blocks
        encoder.add_request("third", prompts["third"], GREEDY, target="P-one")
        finished: list = []
        stop = time.monotonic() + 60
        while len(finished) < 3:
            assert time.monotonic() < stop, f"deadlocked: only {[o.request_id for o in finished]} finished"
            for output in encoder.step() if encoder.has_unfinished_requests() else encoder.service():
                assert output.error is None
                small.add_request("third", prompts["third"], GREEDY)
            finished += [o for o in small.step() if o.finished]
        assert [o.request_id for o in finished] == ["handed-over", "late", "third"]  # the order they came in
        assert {o.request_id: o.outputs[0].token_ids for o in finished} == expected
        assert inbox.stats.claimed >= 2  # "handed-over" and "third" ran without their encoder
        assert_all_free(small)
    finally:
        small.close()


def wait_for(condition, engine: LLMEngine, seconds: float = 5) -> None:
    stop = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < stop, "timed out"
        engine.service()
        time.sleep(0.01)


def notice(sender: Broker, channel: str, decoder: LLMEngine) -> bytes:
    """The next notice on ``channel`` for ``sender``, servicing the decoder meanwhile."""
    stop = time.monotonic() + 5
    while (item := sender.receive((channel,), timeout=0.01)) is None:
        decoder.service()
        assert time.monotonic() < stop, f"no {channel} notice"
    return item[1]


def test_payloads_that_do_not_match_their_metadata_are_refused(decoder, redis_server):
    sender = Broker(redis_server.url, "tester", "bart")
    dim = decoder.checkpoint.config.d_model
    sender.send_metadata("P", Metadata("wrong-shape", "tester", 5, (5, dim), "bfloat16"))
    assert b'"error": null' in notice(sender, "allocated", decoder)
    sender.send_states("P", "wrong-shape", torch.zeros(4, dim))
    assert b"states of shape [4, 128]; the metadata said [5, 128]" in notice(sender, "injected", decoder)
    sender.send_metadata("P", Metadata("wrong-dim", "tester", 5, (5, dim + 1), "bfloat16"))
    assert b"refused metadata: shape [5, 129] for encoder_len 5; expected [5, 128]" in \
        notice(sender, "allocated", decoder)
    sender.send_metadata("P", Metadata("float32", "tester", 5, (5, dim), "float32"))
    assert b"refused metadata: dtype float32" in notice(sender, "allocated", decoder)
    assert_all_free(decoder)


def test_reservations_expire_when_states_or_requests_do_not_come(encoder, decoder, redis_server):
    sender = Broker(redis_server.url, "tester", "bart")
    expired = decoder.encoder_inbox.stats.expired
    sender.send_metadata("P", Metadata("never-sent", "tester", 5, (5, decoder.checkpoint.config.d_model), "bfloat16"))
    wait_for(lambda: "never-sent" in decoder.encoder_inbox.reserved, decoder)
    assert decoder.scheduler.kv.num_free_blocks < decoder.config.num_kv_blocks
    # An encoder output handed over, whose request never reaches the decoder (the proxy gave up).
    encoder.add_request("never-claimed", "Hello world", GREEDY, target="P")
    stop = time.monotonic() + 10
    while not any(o.request_id == "never-claimed" for o in encoder.step() + encoder.service()):
        decoder.service()
        assert time.monotonic() < stop
    wait_for(lambda: decoder.encoder_inbox.stats.expired - expired == 2, decoder, seconds=3 * TIMEOUT)
    assert_all_free(decoder)


def test_an_encode_request_fails_when_no_allocation_notice_comes(encoder):
    encoder.allocation_timeout = 0.3
    try:
        encoder.add_request("nobody-listens", "Hello world", GREEDY, target="no-such-instance")
        stop = time.monotonic() + 10
        outputs = []
        while not outputs:
            outputs = [o for o in encoder.step() + encoder.service() if o.request_id == "nobody-listens"]
            assert time.monotonic() < stop
        assert isinstance(outputs[0].error, TransferError)
        assert "no allocation notice from prefill-decode instance 'no-such-instance' within" in str(outputs[0].error)
    finally:
        encoder.allocation_timeout = 600.0


def test_an_aborted_request_gives_back_its_reserved_blocks(encoder, decoder):
    outputs = run(encoder, decoder, [])  # nothing
    assert outputs == {}
    encoder.add_request("aborted", "Hello world", GREEDY, target="P")
    stop = time.monotonic() + 10
    while not any(o.request_id == "aborted" for o in encoder.step() + encoder.service()):
        decoder.service()
        assert time.monotonic() < stop
    wait_for(lambda: decoder.encoder_inbox.num_unclaimed == 1, decoder)
    decoder.add_request("aborted", "Hello world", GREEDY)
    assert decoder.requests["aborted"].encoder_cached
    decoder.abort_request("aborted")
    assert_all_free(decoder)


def test_requests_fail_clearly_while_the_broker_is_down_and_succeed_after(bart, reference):
    server = RedisServer().start()
    encoder = EncodeEngine.from_model(bart, CONFIG, Broker(server.url, "E2", "bart"), backend="host",
                                      optimizations="accuracy", transfer_timeout=TIMEOUT)
    decoder = prefill_decode(bart, server.url, "P2")
    try:
        server.stop()
        failed = run(encoder, decoder, [("down", PROMPTS[0], GREEDY)])
        assert isinstance(failed["down"].error, TransferError) and "broker is unreachable" in str(failed["down"].error)
        server.start()  # the same port: both sides reconnect
        key = f"{id(GREEDY)}-0"
        outputs = run(encoder, decoder, [(key, PROMPTS[0], GREEDY)], deadline=30)
        assert outputs[key].outputs[0].token_ids == reference[key].outputs[0].token_ids
        assert_all_free(decoder)
    finally:
        encoder.close()
        decoder.close()
        server.stop()
