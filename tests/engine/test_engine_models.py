"""The engine end to end on the real model classes (host backend, accuracy profile).

Whisper tiny.en (real weights, real speech segments), a tiny random BART (encoder prompts of 5..128 tokens,
default and explicit decoder prompts), a tiny random Llama (GQA; prompts of 3..200 tokens) and a tiny random
Llama 3.2 Vision (image requests of 1..4 tiles beside text-only ones), each with an ``n = 2`` request. Each model's requests run alone, then together: all at once with chunked prefill under a
small budget, arriving over time without chunking, and in a pool too small for them (preemption happens and
is counted). Greedy tokens must equal the solo run's; a difference may only occur at a near-tie, and is
printed with the solo run's logit margin there. Greedy output must agree with HF ``generate`` under the closeness
rule of ``tests/closeness.py`` (identical up to the first difference, each side's token in the other's top 5, HF's
margin there a near-tie).
After every run every block is free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from transformers import GenerationMixin
from transformers import WhisperForConditionalGeneration as HFWhisper

from tests.closeness import NEAR_TIE, identical_prefix, top5
from tests.models.test_mllama_pcc import hf_inputs
from tt_models.audio import speech_sample
from tt_models.checkpoints import Checkpoint, load_hf_checkpoint
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams
from tt_models.testing.images import random_image
from tt_models.testing.llama import tiny_model
from tt_models.testing.mllama import IMAGE_TOKEN, tiny_mllama
from tt_models.testing.seq2seq import tiny_seq2seq

pytestmark = pytest.mark.slow
NEW_TOKENS = 16
WHISPER_TOKENS = 40
MODELS = ("llama", "bart", "whisper", "mllama")


@dataclass
class Case:
    checkpoint: object
    requests: list[tuple[str, object, SamplingParams]]
    hf_top5: dict[str, tuple[list[int], list[dict[int, float]]]]  # greedy request -> HF tokens, HF top 5 per step
    max_model_len: int
    small_pool: int


def greedy(ignore_eos: bool = True, max_tokens: int = NEW_TOKENS) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos, logprobs=5)


def sampled() -> SamplingParams:
    return SamplingParams(temperature=0.8, seed=11, n=2, max_tokens=NEW_TOKENS, ignore_eos=True)


def _save(hf, path) -> object:
    hf.save_pretrained(path)
    return load_hf_checkpoint(path)


def _hf_top5(hf, sequences: torch.Tensor, prompt_len: int, **encoder) -> list[dict[int, float]]:
    with torch.no_grad():
        logits = hf(**encoder, **{"decoder_input_ids" if encoder else "input_ids": sequences[None]}).logits[0]
    return [top5(row) for row in logits[prompt_len - 1:-1]]


def llama_case(tmp_path) -> Case:
    hf = tiny_model("llama-gqa")
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 320, (n,), generator=g) for n in (3, 17, 64, 65, 130, 200)]
    requests = [(f"llama{i}", {"prompt_token_ids": p.tolist()}, greedy()) for i, p in enumerate(prompts)]
    requests.append(("llama-n2", {"prompt_token_ids": prompts[1].tolist()}, sampled()))
    hf_top5 = {}
    for (request_id, _, _), p in zip(requests, prompts):
        with torch.no_grad():
            seq = hf.generate(p[None], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0]
        hf_top5[request_id] = (seq[len(p):].tolist(), _hf_top5(hf, seq, len(p)))
    return Case(_save(hf, tmp_path / "llama"), requests, hf_top5, max_model_len=256, small_pool=8)


def bart_case(tmp_path) -> Case:
    hf = tiny_seq2seq("bart")
    hf.generation_config.forced_eos_token_id = None
    g = torch.Generator().manual_seed(2)
    start, bos = hf.config.decoder_start_token_id, hf.config.bos_token_id
    # Decoder prompts of 30 tokens grow into a second block while decoding: in the small pool that preempts.
    long = [start] + list(range(20, 49))
    shapes = [(5, None), (17, long), (30, long), (45, long), (128, [start] + list(range(20, 30))), (3, [start, bos])]
    requests, hf_top5 = [], {}
    for i, (enc_len, decoder) in enumerate(shapes):
        encoder = torch.randint(3, 320, (enc_len,), generator=g)
        prompt = {"prompt_token_ids": encoder.tolist()} if decoder is None else {
            "encoder_prompt": {"prompt_token_ids": encoder.tolist()}, "decoder_prompt": {"prompt_token_ids": decoder}}
        requests.append((f"bart{i}", prompt, greedy()))
        decoder_ids = torch.tensor(decoder or [start, bos])  # the default decoder prompt is <DEC><BOS>
        with torch.no_grad():
            seq = GenerationMixin.generate(hf, input_ids=encoder[None], decoder_input_ids=decoder_ids[None],
                                           max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                                           eos_token_id=None, pad_token_id=0)[0]
        hf_top5[f"bart{i}"] = (seq[len(decoder_ids):].tolist(),
                               _hf_top5(hf, seq, len(decoder_ids), input_ids=encoder[None]))
    requests.append(("bart-n2", requests[1][1], sampled()))
    return Case(_save(hf, tmp_path / "bart"), requests, hf_top5, max_model_len=64, small_pool=7)


def whisper_case() -> Case:
    checkpoint = load_hf_checkpoint("whisper-tiny.en")
    audio, rate, segments = speech_sample()
    clips = [audio] + [audio[int(s.start * rate):int(s.end * rate)] for s in segments[4:7]]
    requests = [(f"whisper{i}", {"prompt": "", "multi_modal_data": {"audio": (c, rate)}},
                 greedy(ignore_eos=False, max_tokens=WHISPER_TOKENS)) for i, c in enumerate(clips)]
    requests.append(("whisper-n2", requests[0][1], sampled()))
    features = checkpoint.processor.feature_extractor(clips, sampling_rate=rate, return_tensors="pt").input_features
    hf = HFWhisper(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True)
    with torch.no_grad():
        out = hf.generate(features, generation_config=checkpoint.generation_config, max_new_tokens=WHISPER_TOKENS,
                          return_dict_in_generate=True, output_scores=True)
    eos = checkpoint.generation_config.eos_token_id
    hf_top5 = {}
    for i in range(len(clips)):
        tokens = out.sequences[i, -len(out.scores):].tolist()
        steps = len(tokens) if eos not in tokens else tokens.index(eos) + 1
        hf_top5[f"whisper{i}"] = (tokens[:steps], [top5(s[i]) for s in out.scores[:steps]])
    # Two requests' cross blocks (47 of 32 positions each) and their first self blocks fill the pool: the
    # whole clip's transcript growing into a second self block preempts the other.
    return Case(checkpoint, requests, hf_top5, max_model_len=64, small_pool=96)


def mllama_case(tmp_path) -> Case:
    """Image requests of 1, 3 and 4 tiles and text-only requests; prompts from 3 to 71 tokens."""
    hf = tiny_mllama()
    g = torch.Generator().manual_seed(3)
    # The first three requests fill the small pool (9 blocks of 32: 1 + 4 + 4, cross blocks included); the text
    # request grows into a second block while decoding, which preempts the newest, an image request: recomputed,
    # it runs its vision encoder again.
    shapes = [(None, 30), ((120, 50), 6), ((40, 30), 29), ((200, 200), 1), (None, 70)]
    requests, hf_top5 = [], {}
    for i, (size, length) in enumerate(shapes):
        text = torch.randint(3, 300, (length,), generator=g).tolist()
        prompt = [1, IMAGE_TOKEN, *text] if size else [1, *text]
        image = None if size is None else random_image(*size, seed=i)
        multi_modal = {} if image is None else {"multi_modal_data": {"image": image}}
        requests.append((f"mllama{i}", {"prompt_token_ids": prompt, **multi_modal}, greedy()))
        inputs = {"input_ids": torch.tensor([prompt])} if image is None else hf_inputs(hf, prompt, image)
        with torch.no_grad():
            seq = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                              eos_token_id=None, pad_token_id=0)[0]
            full = {"input_ids": seq[None]} if image is None else hf_inputs(hf, seq.tolist(), image)
            logits = hf(**full).logits[0]
        hf_top5[f"mllama{i}"] = (seq[len(prompt):].tolist(), [top5(row) for row in logits[len(prompt) - 1:-1]])
    requests.append(("mllama-n2", requests[1][1], sampled()))
    checkpoint = Checkpoint(hf.config, hf.state_dict(), None, tmp_path)
    return Case(checkpoint, requests, hf_top5, max_model_len=128, small_pool=9)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], tuple[Case, dict]]:
    """Each model's case and its solo outputs, made the first time a test of this module asks for that model and
    kept for the others (the tests take the models in different combinations: pytest's grouping by a fixture's
    parameter would build some twice)."""
    made: dict[str, tuple[Case, dict]] = {}

    def get(model: str) -> tuple[Case, dict]:
        if model not in made:
            case = whisper_case() if model == "whisper" else {"llama": llama_case, "bart": bart_case,
                                                              "mllama": mllama_case}[model](
                tmp_path_factory.mktemp(model))
            made[model] = case, _solo(case)
        return made[model]

    return get


@pytest.fixture
def case(model, built) -> Case:
    return built(model)[0]


@pytest.fixture
def solo(model, built) -> dict:
    return built(model)[1]


def _engine(case: Case, mesh_shape: tuple[int, int] | None = None, **config) -> LLMEngine:
    config = EngineConfig(**{"max_num_seqs": 8, "block_size": 32, "max_model_len": case.max_model_len, **config})
    return LLMEngine(case.checkpoint, config, backend="host", optimizations="accuracy", mesh_shape=mesh_shape)


def _run(engine: LLMEngine, requests, arrive_every: int = 0) -> dict:
    """Outputs by request id; request ``i`` arrives at step ``i * arrive_every``. A request stays on its replica;
    every block of every replica is free after."""
    outputs, step, pending, replicas = {}, 0, list(requests), {}
    while pending or engine.has_unfinished_requests():
        while pending and step >= (len(requests) - len(pending)) * arrive_every:
            engine.add_request(*pending.pop(0))
        for request in engine.requests.values():
            assert replicas.setdefault(request.request_id, request.replica) == request.replica
        outputs.update({o.request_id: o for o in engine.step() if o.finished})
        step += 1
    for kv in engine.scheduler.kvs:
        assert kv.num_free_blocks == kv.num_blocks and kv.num_free_host_blocks == kv.num_host_blocks
    assert set(replicas.values()) == set(range(len(engine.scheduler.kvs)))  # every replica served some
    return outputs


def _solo(case: Case) -> dict:
    """Outputs by request id, each request run alone."""
    engine = _engine(case)
    outputs = {}
    for request in case.requests:
        outputs.update(_run(engine, [request]))
    engine.close()
    return outputs


def _compare_with_solo(name: str, outputs: dict, solo: dict, same_draws: bool = True) -> None:
    """Greedy sequences equal the solo run's up to a near-tie; sampled ones equal it exactly when the logits are
    bit-identical (``same_draws``: the same operations in the same order), else they are only as long (a seeded draw
    inverts the cumulative distribution at its uniform: logits that differ in their last bits may move it to the
    next token there, in or out of the top 5, and the sequences part)."""
    for request_id, out in outputs.items():
        for got, ref in zip(out.outputs, solo[request_id].outputs):
            if got.token_ids == ref.token_ids:
                continue
            k = next(i for i, (a, b) in enumerate(zip(got.token_ids, ref.token_ids)) if a != b)
            if ref.logprobs is None and not same_draws:
                assert len(got.token_ids) == len(ref.token_ids)
                continue
            if ref.logprobs is None:
                pytest.fail(f"{name} {request_id}: sampled sequence {got.index} differs from its solo run at {k}")
            top = ref.logprobs[k]
            margin = top[ref.token_ids[k]].logprob - top.get(got.token_ids[k], top[ref.token_ids[k]]).logprob
            print(f"\n{name} {request_id}: differs from its solo run at token {k}, solo logprob margin {margin:.4f}")
            assert got.token_ids[k] in top and margin < NEAR_TIE, f"{request_id}: not a near-tie at token {k}"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("run", ["together-chunked", "over-time-unchunked", "small-pool", "async-decode"])
def test_batched_runs_equal_solo_runs(model, case, solo, run):
    if run == "together-chunked":
        engine = _engine(case, max_num_batched_tokens=48)
        outputs = _run(engine, case.requests)
    elif run == "async-decode":  # each decode step issued before the previous step's tokens are detokenized
        # Greedy steps sampled on the device, steady ones feeding their tokens back there (``reset_batch=False``):
        # greedy requests without logprobs (the solo runs' give the near-tie margins), the n = 2 one first, so that
        # the steps after it ends are all greedy.
        engine = _engine(case, async_decode=True, num_kv_blocks=case.small_pool, sample_on_device=True)
        requests = sorted(((r, p, replace(s, logprobs=None)) for r, p, s in case.requests), key=lambda r: r[2].n == 1)
        outputs = _run(engine, requests, arrive_every=1)
        # (Whisper's decoding rules, suppressed tokens and timestamps, keep its steps on the host.)
        assert (engine.runner.model.feedback.steps > 0) == (model != "whisper")
    elif run == "over-time-unchunked":
        engine = _engine(case, enable_chunked_prefill=False)
        outputs = _run(engine, case.requests, arrive_every=2)
    else:
        engine = _engine(case, num_kv_blocks=case.small_pool)
        outputs = _run(engine, case.requests)
        preemptions = sum(o.metrics.num_preemptions for o in outputs.values())
        print(f"\n{run}: {preemptions} preemptions", {k: o.metrics.num_preemptions for k, o in outputs.items()})
        assert preemptions > 0, "the small pool should force preemption"
    engine.close()
    assert outputs.keys() == solo.keys()
    assert all(len(outputs[request_id].outputs) == params.n for request_id, _, params in case.requests)
    _compare_with_solo(run, outputs, solo)


def test_prefix_cache_hits_agree_with_whole_prefills(built):
    """The Llama requests run twice on one engine: the second time each prompt's full blocks but its last token's are
    cached (32-token blocks), and the model prefills from the first block after them, eagerly; the tokens are the solo
    runs' (whole prefills) up to a near-tie."""
    case, solo = built("llama")
    engine = _engine(case)
    _run(engine, case.requests)
    again = _run(engine, case.requests)
    engine.close()
    prompts = {request_id: len(prompt["prompt_token_ids"]) for request_id, prompt, params in case.requests
               if params.n == 1}
    assert {r: o.num_cached_tokens for r, o in again.items() if r in prompts} == {
        r: (n - 1) // 32 * 32 for r, n in prompts.items()}
    _compare_with_solo("prefix-cache", again, solo, same_draws=False)


# Whisper (real weights: the costly case) runs each engine feature once: 2 replicas here, and tensor parallelism
# below as two tensor-parallel replicas, which is both at once. The other models run every combination.
DATA_PARALLEL_RUNS = [(m, r) for m in MODELS for r in (2, 4) if (m, r) != ("whisper", 4)]
TENSOR_PARALLEL_RUNS = [(m, d) for m in MODELS for d in (1, 2) if (m, d) != ("whisper", 1)]


@pytest.mark.parametrize(("model", "replicas"), DATA_PARALLEL_RUNS)
def test_data_parallel_replicas_equal_one_replica(case, solo, replicas):
    """Replicas on a host mesh of as many devices, each with its own pool (the small one: preemption happens per
    replica) and ``8 / replicas`` slots."""
    engine = _engine(case, data_parallel_size=replicas, num_kv_blocks=case.small_pool)
    outputs = _run(engine, case.requests)
    engine.close()
    assert outputs.keys() == solo.keys()
    _compare_with_solo(f"{replicas} replicas", outputs, solo)


# Tensor-parallel meshes per model, as small as show the point: a 1x4 group, and 1x8 as two data-parallel 1x4 groups
# (Whisper tiny's 6 heads and the tiny Mllama's 64-wide vision tower split over 2 chips, not 4).
TP_MESHES = {"llama": ((1, 4), (1, 8)), "bart": ((1, 4), (1, 8)), "whisper": ((1, 2), (1, 4)),
             "mllama": ((1, 2), (1, 4))}


@pytest.mark.parametrize(("model", "data_parallel"), TENSOR_PARALLEL_RUNS)
def test_tensor_parallel_replicas_equal_one_chip(case, solo, data_parallel):
    """A mixed workload on tensor-parallel replicas: chunked prefill under a small budget in a pool small enough to
    preempt (by recompute, and by swap for the n = 2 request), one more request aborted mid-run; the one-chip
    tokens (near-ties aside), and every block free after."""
    mesh = TP_MESHES[case.checkpoint.config.model_type][data_parallel - 1]
    engine = _engine(case, mesh_shape=mesh, data_parallel_size=data_parallel, max_num_batched_tokens=48,
                     num_kv_blocks=case.small_pool)
    chips = mesh[0] * mesh[1] // data_parallel
    assert all(device.get_num_devices() == chips for device in engine.runner.model.devices)
    engine.add_request("aborted", *case.requests[0][1:])
    engine.step()
    assert engine.abort_request("aborted") is not None
    outputs = _run(engine, case.requests)
    engine.close()
    preemptions = sum(o.metrics.num_preemptions for o in outputs.values())
    print(f"\n{mesh} with {data_parallel} replicas: {preemptions} preemptions")
    assert preemptions > 0
    assert outputs.keys() == solo.keys()
    # Split sums round otherwise than one chip's: the logits are not bit-identical, so neither are the seeded draws.
    _compare_with_solo(f"{chips}-chip replicas", outputs, solo, same_draws=False)


@pytest.mark.parametrize("model", MODELS)
def test_greedy_agrees_with_hf_generate(case, solo):
    for request_id, (hf_tokens, hf_top5) in case.hf_top5.items():
        ours = solo[request_id].outputs[0]
        exact = identical_prefix(ours.token_ids, hf_tokens, ours.logprobs, hf_top5)
        print(f"\n{request_id}: {exact}/{len(hf_tokens)} tokens identical to HF generate")


@pytest.mark.parametrize("audio, message", [
    (b"not audio at all", "audio"),
    ((np.full(16000, np.nan, dtype=np.float32), 16000), "NaN"),
    ((np.zeros(16000 * 31, dtype=np.float32), 16000), "30"),
    ("/nonexistent/speech.wav", "audio"),
])
def test_bad_audio_fails_alone(audio, message):
    checkpoint = load_hf_checkpoint("whisper-tiny.en")
    engine = LLMEngine(checkpoint, EngineConfig(max_num_seqs=2, max_model_len=32), backend="host",
                       optimizations="accuracy")
    wave, rate, segments = speech_sample()
    clip = wave[int(segments[7].start * rate):int(segments[7].end * rate)]
    engine.add_request("good", {"prompt": "", "multi_modal_data": {"audio": (clip, rate)}}, greedy(False, 12))
    with pytest.raises(ValueError, match=message):
        engine.add_request("bad", {"prompt": "", "multi_modal_data": {"audio": audio}}, greedy())
    outputs = _run(engine, [])
    engine.close()
    assert list(outputs) == ["good"] and "Chicago" in outputs["good"].outputs[0].text
