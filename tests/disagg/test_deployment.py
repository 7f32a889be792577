"""A disaggregated deployment, started as a user starts it (real Redis with a password and an ACL user, ``tt-models
serve --role`` and ``tt-models proxy`` processes, the official ``openai`` client): outputs equal one ``both``
instance's in three topologies, it survives its faults, and no password shows in a log or an endpoint."""

from __future__ import annotations

import io
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile
import torch

from tests.disagg.deployment import (BART, TRANSFER_TIMEOUT, WHISPER, bart_prompts, proxy, run_workload, serve,
                                     speech_clips)
from tests.disagg.redis_server import RedisServer
from tt_models.audio import speech_sample
from tt_models.disagg.broker import Broker, Metadata
from tt_models.testing.metrics import metric
from tt_models.testing.seq2seq import save_tiny_bart

# Several server processes with time bounds on failures: they run alone, after the parallel part of the suite.
pytestmark = [pytest.mark.slow, pytest.mark.alone]

ADMIN_PASSWORD, ENCODER, ENCODER_PASSWORD = "epd-admin-Pw-41c7", "encoder", "epd-encoder-Pw-93be"

CLIPS = speech_clips()[:5]  # the whole call and its first 4 segments
PROMPTS = bart_prompts(32 - len(CLIPS))  # 32 requests at once: twice an instance's max_num_seqs


class Deployment:
    def __init__(self, tmp) -> None:
        self.redis = RedisServer(password=ADMIN_PASSWORD, users={ENCODER: ENCODER_PASSWORD}).start()
        bart = save_tiny_bart(tmp / "bart")
        # Encode instances as an ACL user, prefill-decode instances as the default user with its password.
        brokers = {"encode": self.redis.user_url(ENCODER, ENCODER_PASSWORD), "prefill_decode": self.redis.url}
        role = lambda r, name: ("--role", r, "--broker", brokers[r], "--instance-name", name)  # noqa: E731
        self.e1 = serve(bart, tmp / "e1.log", *role("encode", "e1"))
        self.e2 = serve(bart, tmp / "e2.log", *role("encode", "e2"))
        self.pd1 = serve(bart, tmp / "pd1.log", *role("prefill_decode", "pd1"))
        # The smallest pool Whisper takes (one request: 24 cross + 4 self blocks): its encoder outputs queue.
        self.pd2 = serve(bart, tmp / "pd2.log", *role("prefill_decode", "pd2"), "--num-kv-blocks", "28")
        self.both = serve(bart, tmp / "both.log")
        self.servers = [self.e1, self.e2, self.pd1, self.pd2, self.both]
        self.topologies = {"1E+1PD": ([self.e1], [self.pd1]), "2E+1PD": ([self.e1, self.e2], [self.pd1]),
                           "1E+2PD": ([self.e1], [self.pd1, self.pd2])}
        self.proxies = {name: proxy(*instances, tmp / f"{name}.log") for name, instances in self.topologies.items()}
        for process in [*self.servers, *self.proxies.values()]:
            process.wait_healthy()

    def outstanding(self, topology: str) -> float:
        """The requests in flight at a proxy (its gauge per instance)."""
        text = self.proxies[topology].metrics()
        encoders, decoders = self.topologies[topology]
        return sum(metric(text, "tt_models_proxy:outstanding_requests", instance=p.url)
                   for p in [*encoders, *decoders])

    def stop(self) -> None:
        processes = [*self.proxies.values(), *self.servers]
        for process in processes:  # all at once: their graceful stops overlap
            process.terminate()
        for process in processes:
            process.stop()
        self.redis.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    deployment = Deployment(tmp_path_factory.mktemp("epd"))
    yield deployment
    deployment.stop()


@pytest.fixture(scope="module")
def expected(deployment):
    results = run_workload(deployment.both.url, CLIPS, PROMPTS, stream=False)
    assert all(r.text for r in results[:len(CLIPS)]), "the reference transcripts are empty"
    return [r.text for r in results]


ENCODE_QUEUES = ("encode_waiting", "awaiting_allocation", "awaiting_injection")
PREFILL_DECODE_QUEUES = ("metadata_pending", "awaiting_states", "unclaimed")


def held(deployment: Deployment) -> dict[str, float]:
    """What the live instances and the proxies still hold: nonzero disaggregation queues, KV blocks in use on the
    prefill-decode instances, requests outstanding at a proxy (a gauge missing fails)."""
    found = {}
    for instance, queues in [(deployment.e1, ENCODE_QUEUES), (deployment.e2, ENCODE_QUEUES),
                             (deployment.pd1, PREFILL_DECODE_QUEUES), (deployment.pd2, PREFILL_DECODE_QUEUES)]:
        if instance.process.poll() is not None:  # killed by a test
            continue
        text = instance.metrics()
        for model in (WHISPER, BART):
            found |= {f"{instance.log.name} {model} {q}": metric(text, "tt_models:disagg_queue_length",
                                                                 model_name=model, queue=q) for q in queues}
            if queues is PREFILL_DECODE_QUEUES:
                found[f"{instance.log.name} {model} KV blocks"] = metric(text, "tt_models:kv_blocks_in_use",
                                                                         model_name=model)
    found |= {f"proxy {name} outstanding": deployment.outstanding(name) for name in deployment.proxies}
    return {key: value for key, value in found.items() if value != 0}


def assert_drained(deployment: Deployment, seconds: float = TRANSFER_TIMEOUT + 10) -> None:
    """Queues and reservations empty within ``seconds``: lost encoder outputs' reservations expire after the
    transfer timeout."""
    deadline = time.monotonic() + seconds
    while left := held(deployment):
        assert time.monotonic() < deadline, f"not drained after {seconds} s: {left}"
        time.sleep(0.5)


@pytest.mark.parametrize("topology", ["1E+1PD", "2E+1PD", "1E+2PD"])
def test_outputs_equal_one_instance(deployment, expected, topology):
    results = run_workload(deployment.proxies[topology].url, CLIPS, PROMPTS, stream=True)
    assert [r.status for r in results] == [None] * len(results)
    assert [r.text for r in results] == expected
    assert_drained(deployment)


def test_a_small_pool_holds_encoder_outputs_back(deployment, expected):
    """pd2's pool takes one encoder output at a time: 8 segments at once through 1E+2PD, about half of them to pd2,
    wait there for room, and come out as the one instance's."""
    speech = CLIPS[1:] * 2
    results = run_workload(deployment.proxies["1E+2PD"].url, speech, [], stream=False)
    assert [r.text for r in results] == expected[1:len(CLIPS)] * 2
    text = deployment.pd2.metrics()
    assert metric(text, "tt_models:encoder_outputs_total", model_name=WHISPER, outcome="waited") > 0
    assert metric(text, "tt_models:encoder_outputs_total", model_name=WHISPER, outcome="claimed") > 1


def test_metrics_of_every_role(deployment):
    e1, pd1, both = deployment.e1.metrics(), deployment.pd1.metrics(), deployment.both.metrics()
    for queue in ("encode_waiting", "awaiting_allocation", "awaiting_injection"):
        assert f'tt_models:disagg_queue_length{{model_name="{WHISPER}",queue="{queue}"}}' in e1
    for queue in ("metadata_pending", "awaiting_states", "unclaimed"):
        assert f'tt_models:disagg_queue_length{{model_name="{WHISPER}",queue="{queue}"}}' in pd1
    sent = metric(e1, "tt_models:broker_bytes_total", model_name=WHISPER, channel="states", direction="sent")
    received = metric(pd1, "tt_models:broker_bytes_total", model_name=WHISPER, channel="states", direction="received")
    states = metric(pd1, "tt_models:broker_messages_total", model_name=WHISPER, channel="states", direction="received")
    assert states >= len(CLIPS) and received >= states * 1500 * 384 * 2  # bf16 [1500, 384] per request
    assert sent > 0
    assert metric(both, "vllm:num_requests_waiting", model_name=WHISPER) >= 0  # (metric fails on a missing sample)
    assert "tt_models_proxy:outstanding_requests" in httpx.get(f"{deployment.proxies['2E+1PD'].url}/metrics").text


def test_a_payload_that_does_not_match_its_metadata_is_refused(deployment, expected):
    sender = Broker(deployment.redis.url, "tester", WHISPER)
    sender.send_metadata("pd1", Metadata("forged", "tester", 1500, (1500, 384), "bfloat16"))
    assert sender.receive(("allocated",), timeout=10)[1] == b'{"request_id": "forged", "error": null}'
    sender.send_states("pd1", "forged", torch.zeros(1499, 384))
    _, notice = sender.receive(("injected",), timeout=10)
    assert b"states of shape [1499, 384]; the metadata said [1500, 384]" in notice
    assert_drained(deployment, seconds=5)
    results = run_workload(deployment.proxies["1E+1PD"].url, CLIPS[1:3], PROMPTS[:2], stream=False)
    assert [r.text for r in results] == expected[1:3] + expected[len(CLIPS):len(CLIPS) + 2]


def test_long_audio_through_the_proxy(deployment):
    """Two windows (the call, then its first 12 s again): the encode instance runs both windows' encoders, the
    prefill-decode instance decodes (and encodes itself any unfinished rest a window leaves)."""
    audio, rate, _ = speech_sample()
    buffer = io.BytesIO()
    soundfile.write(buffer, np.concatenate([audio, np.zeros(rate, dtype=audio.dtype), audio[:12 * rate]]), rate,
                    format="WAV")
    wav = buffer.getvalue()
    [expected] = run_workload(deployment.both.url, [wav], [], stream=False)
    [split] = run_workload(deployment.proxies["1E+1PD"].url, [wav], [], stream=False)
    assert expected.text and split.text == expected.text
    assert_drained(deployment)


def start_workload(url: str, clips, prompts) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(run_workload(url, clips, prompts, stream=False, seconds=300)))
    thread.start()
    return thread, out


def wait_busy(instance, seconds: float = 60) -> None:
    """Until the encode instance holds requests."""
    deadline = time.monotonic() + seconds
    while sum(metric(instance.metrics(), "tt_models:disagg_queue_length", model_name=WHISPER, queue=q)
              for q in ("encode_waiting", "awaiting_allocation", "awaiting_injection")) == 0:
        assert time.monotonic() < deadline, "the encode instance never got busy"
        time.sleep(0.05)


def check_faulted(results, expected_texts, fault_time: float, bound: float) -> int:
    """Every request succeeded with the expected text or failed with a 5xx; failures came within ``bound``
    seconds of the fault. Returns the number of failures."""
    assert len(results) == len(expected_texts)
    failed = 0
    for result, text in zip(results, expected_texts):
        if result.status is None:
            assert result.text == text
        else:
            failed += 1
            assert 500 <= result.status < 600
            assert result.seconds < fault_time + bound
    return failed


def test_an_encode_instance_killed_mid_run(deployment, expected):
    speech = CLIPS[1:] * 2
    texts = expected[1:len(CLIPS)] * 2
    started = time.monotonic()
    thread, results = start_workload(deployment.proxies["2E+1PD"].url, speech, [])
    wait_busy(deployment.e2)
    deployment.e2.kill()
    killed = time.monotonic() - started
    thread.join(timeout=300)
    assert not thread.is_alive(), "requests hang after an encode instance died"
    # Its requests fail at once (its connections reset); the others finish.
    assert check_faulted(results, texts, killed, bound=10) > 0
    assert_drained(deployment)  # reservations of its lost outputs expire after the transfer timeout
    after = run_workload(deployment.proxies["2E+1PD"].url, CLIPS[1:5], PROMPTS[:4], stream=False)
    assert [r.text for r in after] == expected[1:5] + expected[len(CLIPS):len(CLIPS) + 4]


def test_redis_restarted_mid_run(deployment, expected):
    speech = CLIPS[1:] * 2
    texts = expected[1:len(CLIPS)] * 2
    started = time.monotonic()
    thread, results = start_workload(deployment.proxies["1E+1PD"].url, speech, [])
    wait_busy(deployment.e1)
    in_flight = deployment.outstanding("1E+1PD")  # read just before the kill: the fault hits requests under way
    deployment.redis.stop()
    down = time.monotonic() - started
    assert in_flight > 0
    time.sleep(1)
    deployment.redis.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "requests hang after the broker restarted"
    check_faulted(results, texts, down, bound=TRANSFER_TIMEOUT + 10)
    assert_drained(deployment)
    after = run_workload(deployment.proxies["1E+1PD"].url, CLIPS[1:5], PROMPTS[:4], stream=False)
    assert [r.text for r in after] == expected[1:5] + expected[len(CLIPS):len(CLIPS) + 4]


def test_no_password_in_logs_or_endpoints(deployment):
    """Last: the logs hold the warnings of the faults above (a broker restarted, an instance killed)."""
    for process in [*deployment.servers, *deployment.proxies.values()]:
        shown = [process.log.read_text()]
        if process in deployment.servers and process.process.poll() is None:  # (e2 was killed)
            shown += [httpx.get(f"{process.url}{path}", timeout=10).text for path in ("/disagg/info", "/metrics")]
        for text in shown:
            assert ADMIN_PASSWORD not in text and ENCODER_PASSWORD not in text
