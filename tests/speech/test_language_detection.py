"""Language detection with whisper-base (multilingual) on the host backend, accuracy profile, against HF's
``detect_language`` with the same weights in float32: through the engine API (``tt_models.speech
.detect_language``) and through the OpenAI server (``verbose_json`` reports the language by name).

One engine serves every test: the offline runs first, then a real uvicorn server takes it over. The encoder is
the cost (one 30 s window per request on the host backend), so every request a test needs is sent at once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from tests.server.cases import ServerThread
from tests.speech.clips import SENTENCES, espeak_wavs, hf_detect
from tt_models import LLM
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.server import create_app
from tt_models.speech import DetectedLanguage, LanguageDetector, detect_language

pytestmark = pytest.mark.slow

MODEL = "whisper-base"
TRANSLATED = "de"  # the clip translated through the server
OVERRIDDEN = ("it", "es")  # (clip, explicit language): a language the clip is not in, honoured
# One temperature, just above greedy (OpenAI's 0 is the fallback, covered by test_fallback.py): a clip read in a
# language it is not in would be decoded again at every temperature, minutes of sampled text on the host backend.
TEMPERATURE = 0.01
# Ours against HF's: measured 0.000-0.017 (fr the largest). Deterministic: every clip in one batched prefill step
# (asserted below) on one torch thread, so machine load cannot move it.
MAX_TV_DISTANCE = 0.05


@pytest.fixture(scope="module")
def wavs(tmp_path_factory) -> dict[str, bytes]:
    return espeak_wavs(tmp_path_factory.mktemp("espeak"))


@pytest.fixture(scope="module")
def hf(wavs):
    return hf_detect(wavs)


@pytest.fixture(scope="module")
def llm():
    # A prefill budget for every clip's encoder at once: the detection requests share one step.
    with LLM(MODEL, max_num_seqs=8, max_model_len=448, max_num_batched_tokens=8 * 1501, backend="host",
             optimizations="accuracy") as llm:
        yield llm


@pytest.fixture(scope="module")
def offline(llm, wavs, hf):
    """The engine's own runs, before the server takes the engine over: the detections (one batch), then the
    translation of the TRANSLATED clip from HF's language and the OVERRIDDEN clip in its explicit language."""
    engine = llm.llm_engine
    steps = dict(engine.stats)
    detected = detect_language(llm, list(wavs.values()))
    step_counts = {k: engine.stats[k] - steps[k] for k in ("prefill_steps", "decode_steps")}
    clip, language = OVERRIDDEN
    # verbose_json decodes with timestamps: so do the references (LLM.transcribe, as the server runs it).
    references = {
        "translated": llm.transcribe(wavs[TRANSLATED], language=hf[TRANSLATED].language, task="translate",
                                     timestamps=True, temperature=TEMPERATURE),
        "overridden": llm.transcribe(wavs[clip], language=language, timestamps=True, temperature=TEMPERATURE)}
    return dict(zip(wavs, detected)), step_counts, references


def _top(probabilities: dict[str, float], n: int = 3) -> str:
    return ", ".join(f"{code} {p:.3f}" for code, p in list(probabilities.items())[:n])


def test_engine_detects_every_language_as_hf_does(offline, hf):
    detected, step_counts, _ = offline
    print(f"\n{'clip':4} | {'HF float32 (top 3)':40} | {'ours, host accuracy (top 3)':40} | TV")
    for code in SENTENCES:
        ours, theirs = detected[code], hf[code]
        tv = 0.5 * sum(abs(ours.probabilities[c] - theirs.probabilities[c]) for c in theirs.probabilities)
        print(f"{code:4} | {_top(theirs.probabilities):40} | {_top(ours.probabilities):40} | {tv:.3f}")
        assert isinstance(ours, DetectedLanguage)
        assert ours.language == theirs.language, (code, _top(ours.probabilities), _top(theirs.probabilities))
        assert list(ours.probabilities)[0] == ours.language and sum(ours.probabilities.values()) == pytest.approx(1)
        assert ours.probabilities.keys() == theirs.probabilities.keys()
        assert tv < MAX_TV_DISTANCE
    assert [hf[code].language for code in SENTENCES] == list(SENTENCES)  # the clips are what HF hears them as
    assert step_counts == {"prefill_steps": 1, "decode_steps": 0}  # one batched decoder step for every clip


def test_an_english_only_model_has_no_language_to_detect():
    generation_config = load_hf_checkpoint("whisper-tiny.en").generation_config
    assert not LanguageDetector.supports(generation_config)
    with pytest.raises(ValueError, match="English-only"):
        LanguageDetector(generation_config)


@pytest.fixture(scope="module")
def server(llm, offline):
    with ServerThread(create_app({MODEL: llm.llm_engine})) as running:
        yield running


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's note on translations
def test_server_detects_translates_and_honours_a_language(server, wavs, hf, offline):
    _, _, references = offline
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)

    def upload(code: str) -> tuple:
        return (f"{code}.wav", wavs[code], "audio/wav")

    clip, language = OVERRIDDEN
    calls = {code: (client.audio.transcriptions.create, dict(file=upload(code))) for code in SENTENCES}
    calls["translated"] = (client.audio.translations.create, dict(file=upload(TRANSLATED)))
    calls["overridden"] = (client.audio.transcriptions.create, dict(file=upload(clip), language=language))
    with ThreadPoolExecutor(len(calls)) as pool:  # all at once: the engine batches them
        futures = {key: pool.submit(create, model=MODEL, response_format="verbose_json", temperature=TEMPERATURE,
                                    **kwargs)
                   for key, (create, kwargs) in calls.items()}
        results = {key: future.result() for key, future in futures.items()}

    for code in SENTENCES:
        print(f"{code}: {results[code].language}: {results[code].text}")
        assert results[code].language == LANGUAGES[hf[code].language] and results[code].task == "transcribe"
    translated, overridden = results["translated"], results["overridden"]
    print(f"translated {TRANSLATED}: {translated.text}\n{clip} as {language}: {overridden.text}")
    # OpenAI reports a translation's output language; the text is the engine's from HF's language, translated.
    assert translated.language == "english" and translated.task == "translate"
    assert translated.text == references["translated"].text and references["translated"].language_name == "english"
    assert overridden.language == LANGUAGES[language] and overridden.text == references["overridden"].text
    for result, reference in ((translated, references["translated"]), (overridden, references["overridden"])):
        assert [(s.start, s.end, s.text) for s in result.segments] == \
            [(s.start, s.end, s.text) for s in reference.segments]
        assert all(0 <= s.no_speech_prob <= 1 for s in result.segments)


def test_server_refuses_an_unknown_language(server, wavs):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        response = http.post("/v1/audio/transcriptions", files={"file": ("en.wav", wavs["en"], "audio/wav")},
                             data={"model": MODEL, "language": "xx"})
    assert response.status_code == 400, response.text
    assert "Unsupported language 'xx'" in response.json()["error"]["message"]
