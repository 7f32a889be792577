"""Live transcription over OpenAI's Realtime API (``GET /v1/realtime``), with the official openai client against a
real uvicorn server on Whisper tiny.en (the packaged weights; host backend, accuracy profile).

The recording (about 8 s) is a piece of the real call, a second of silence, an espeak-ng sentence and a second of
silence, sent as 24 kHz PCM16 as OpenAI's clients send it. The expected turns come from the recording alone,
apart from the realtime code: the VAD rule (``vad.py``'s frame levels, speech where ``MIN_SPEECH_FRAMES`` frames
are voiced, a turn from its speech less the prefix padding to ``silence_duration_ms`` after its last speech) applied
to the whole recording resampled to 16 kHz in one go, and each turn's text is ``run_transcriptions`` of that turn's
audio with the options a session decodes with, on the same engine before the server takes it over.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from dataclasses import dataclass

import numpy as np
import openai
import pytest
import soxr
import websockets

from tests.server.cases import ServerThread
from tt_models.audio import load_audio
from tt_models.audio.sample import speech_sample
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app
from tt_models.server.auth import BearerAuth
from tt_models.server.metrics import kv_blocks_in_use
from tt_models.speech import LongFormTranscription, TranscriptionOptions, run_transcriptions
from tt_models.speech.turns import threshold_db
from tt_models.speech.vad import FRAME, HOP, MIN_SPEECH_FRAMES, SpeechActivity

MODEL = "whisper-tiny.en"
RATE, PCM_RATE = 16000, 24000
CHUNK_SECONDS = 0.1
PADDING_MS, SILENCE_MS, THRESHOLD = 300, 500, 0.5
SENTENCE = "The weather is lovely today, so we are going for a long walk in the park."
CALL = (8.8, 12.6)  # seconds of the call: two of Diane's sentences
KEY = "key-one"  # the server's --api-key


@dataclass(frozen=True)
class Expected:
    pcm: bytes  # the recording as the client sends it
    turns: list[tuple[int, int]]  # 16 kHz samples [start, end) of each turn
    texts: list[str]
    speech_ends: list[float]  # seconds: each turn's last voiced sample


def offline_turns(waveform: np.ndarray) -> tuple[list[tuple[int, int]], list[int]]:
    """OpenAI's server_vad over the whole recording at once, on vad.py's frame levels; and each turn's speech end."""
    levels = SpeechActivity(waveform, RATE).levels
    voiced = (levels >= threshold_db(THRESHOLD)).astype(np.int32)
    runs = np.convolve(voiced, np.ones(MIN_SPEECH_FRAMES, dtype=np.int32), mode="valid")
    spoken = np.flatnonzero(runs == MIN_SPEECH_FRAMES)  # frames that begin a run of speech
    starts, ends = spoken * HOP, spoken * HOP + (MIN_SPEECH_FRAMES - 1) * HOP + FRAME
    padding, silence = PADDING_MS * RATE // 1000, SILENCE_MS * RATE // 1000
    turns, speech_ends, floor = [], [], 0
    begin, last = None, None
    for start, end in zip(starts, ends):
        if begin is not None and start >= last + silence:
            turns.append((begin, last + silence))
            speech_ends.append(last)
            floor, begin = last + silence, None
        if begin is None:
            begin = max(floor, start - padding)
        last = end
    if begin is not None and last + silence <= waveform.size:
        turns.append((begin, last + silence))
        speech_ends.append(last)
    return turns, speech_ends


def turn_options() -> TranscriptionOptions:
    return TranscriptionOptions(temperature=0.0, no_speech_threshold=None)


@pytest.fixture(scope="module")
def engine():
    engine = LLMEngine.from_model(MODEL, EngineConfig(max_num_seqs=8, block_size=64), backend="host",
                                  optimizations="accuracy")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def expected(engine, tmp_path_factory) -> Expected:
    call, rate, _ = speech_sample()
    wav = tmp_path_factory.mktemp("espeak") / "sentence.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), SENTENCE], check=True, capture_output=True)
    silence = np.zeros(RATE, dtype=np.float32)
    recording = np.concatenate([call[int(CALL[0] * rate):int(CALL[1] * rate)], silence, load_audio(wav, RATE),
                                silence])
    pcm16 = np.clip(np.round(soxr.resample(recording, RATE, PCM_RATE, quality="HQ") * 32768), -32768, 32767)
    pcm = pcm16.astype("<i2").tobytes()
    waveform = soxr.resample(pcm16.astype(np.float32) / 32768, PCM_RATE, RATE, quality="HQ")  # what the server hears
    turns, speech_ends = offline_turns(waveform)
    assert len(turns) >= 2, turns
    transcripts = run_transcriptions(engine, [LongFormTranscription(engine.processor, (waveform[a:b], RATE),
                                                                    turn_options()) for a, b in turns])
    texts = [t.text for t in transcripts]
    assert all(texts), texts
    return Expected(pcm, turns, texts, [end / RATE for end in speech_ends])


@pytest.fixture(scope="module")
def server(engine, expected):
    app = create_app({MODEL: engine})
    app.add_middleware(BearerAuth, keys=[KEY])
    with ServerThread(app) as running:
        yield running


def client(url: str, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def chunks(pcm: bytes) -> list[bytes]:
    size = int(PCM_RATE * CHUNK_SECONDS) * 2
    return [pcm[i:i + size] for i in range(0, len(pcm), size)]


async def stream_turns(url: str, pcm: bytes, turns: int, pace: bool) -> list[dict]:
    """Connect as OpenAI's clients do, configure server VAD, send ``pcm`` in 100 ms chunks (at real-time pace, or in
    one burst), and return every event received until ``turns`` turns are completed."""
    events: list[dict] = []
    async with client(url).realtime.connect(extra_query={"intent": "transcription"}) as connection:
        async def receive() -> None:
            completed = 0
            while completed < turns:
                event = (await connection.recv()).to_dict()
                events.append(event)
                completed += event["type"] == "conversation.item.input_audio_transcription.completed"

        receiving = asyncio.create_task(receive())
        await connection.session.update(session={"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": PCM_RATE}, "transcription": {"model": MODEL},
            "turn_detection": {"type": "server_vad", "threshold": THRESHOLD, "prefix_padding_ms": PADDING_MS,
                               "silence_duration_ms": SILENCE_MS}}}})
        start = time.monotonic()
        for index, chunk in enumerate(chunks(pcm)):
            if pace:
                await asyncio.sleep(max(0.0, start + index * CHUNK_SECONDS - time.monotonic()))
            await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        await asyncio.wait_for(receiving, 120)
    return events


def check_session(events: list[dict], expected: Expected) -> None:
    """The turns' events, in the protocol's order, against the expected turns and texts."""
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["session.created", "session.updated"]
    assert events[1]["session"]["audio"]["input"]["turn_detection"] == {
        "type": "server_vad", "threshold": THRESHOLD, "prefix_padding_ms": PADDING_MS,
        "silence_duration_ms": SILENCE_MS}
    assert "error" not in kinds, [e for e in events if e["type"] == "error"]
    started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stopped = [e for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    assert [(e["audio_start_ms"], f["audio_end_ms"]) for e, f in zip(started, stopped)] == \
        [(a * 1000 // RATE, b * 1000 // RATE) for a, b in expected.turns]
    items = [e["item_id"] for e in stopped]
    assert [e["item_id"] for e in started] == items
    for previous, item in zip([None, *items], items):
        mine = [e["type"] for e in events if e.get("item_id") == item or e.get("item", {}).get("id") == item]
        assert mine[:5] == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                            "input_audio_buffer.committed", "conversation.item.added", "conversation.item.done"]
        assert next(e for e in events if e["type"] == "input_audio_buffer.committed" and e["item_id"] == item).get(
            "previous_item_id") == previous
    completed = {e["item_id"]: e for e in events if e["type"].endswith("transcription.completed")}
    assert [completed[item]["transcript"] for item in items] == expected.texts
    for item in items:
        deltas = [e["delta"] for e in events if e["type"].endswith("transcription.delta") and e["item_id"] == item]
        assert "".join(deltas) == completed[item]["transcript"]
        assert completed[item]["usage"]["type"] == "tokens" and completed[item]["usage"]["output_tokens"] > 0
    # The text streams as tokens decode: some turn's deltas come in more than one piece.
    assert max(sum(e["type"].endswith("transcription.delta") and e["item_id"] == item for e in events)
               for item in items) > 1


def test_four_sessions_at_once_at_real_time_pace_and_in_a_burst_get_the_vad_segments_transcribed(server, expected,
                                                                                                 engine):
    """Four sessions at once over the one engine: one sends the recording in 100 ms chunks at real-time pace, three
    send it in one burst each. Every session gets the turns of the VAD rule, each transcribed as its audio alone is;
    then no KV block is in use."""

    async def four() -> list[list[dict]]:
        return await asyncio.gather(stream_turns(server.url, expected.pcm, len(expected.turns), pace=True),
                                    *(stream_turns(server.url, expected.pcm, len(expected.turns), pace=False)
                                      for _ in range(3)))

    for events in asyncio.run(four()):
        check_session(events, expected)
    assert kv_blocks_in_use(engine) == 0


def test_bad_events_get_the_error_event_and_the_session_goes_on(server, expected):
    """Bad JSON, an unknown event, a bad field, bad base64, an unsupported format and an empty commit each get
    the error event naming the offending event; then a manual commit (no turn detection) of the first turn's audio
    is transcribed as that audio is."""
    first = expected.turns[0]
    # The first turn's samples at 24 kHz (whole 100 ms chunks around it): committed by hand, the session transcribes
    # every sample since the last commit, which the reference below decodes too.
    pcm = expected.pcm[:int(round(first[1] * PCM_RATE / RATE)) * 2]

    async def session() -> list[dict]:
        events: list[dict] = []
        async with client(server.url).realtime.connect(extra_query={"intent": "transcription"}) as connection:
            bad = [("not json", None),
                   (json.dumps({"type": "response.create", "event_id": "e1"}), "e1"),
                   (json.dumps({"type": "input_audio_buffer.append", "event_id": "e2", "audio": 5}), "e2"),
                   (json.dumps({"type": "input_audio_buffer.append", "event_id": "e3", "audio": "%%%"}), "e3"),
                   (json.dumps({"type": "session.update", "event_id": "e4", "session": {
                       "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm",
                                                                               "rate": 16000}}}}}), "e4"),
                   (json.dumps({"type": "session.update", "event_id": "e5", "session": {
                       "type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1"}}}}}),
                    "e5"),
                   (json.dumps({"type": "input_audio_buffer.commit", "event_id": "e6"}), "e6")]
            for text, _ in bad:
                await connection.send_raw(text)
            await connection.session.update(session={"type": "transcription",
                                                     "audio": {"input": {"turn_detection": None}}})
            for chunk in chunks(pcm):
                await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            await connection.input_audio_buffer.commit()
            while not events or not events[-1]["type"].endswith("transcription.completed"):
                events.append((await asyncio.wait_for(connection.recv(), 120)).to_dict())
        return events

    events = asyncio.run(session())
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert [e["event_id"] for e in errors] == [None, "e1", "e2", "e3", "e4", "e5", "e6"]
    assert [e["code"] for e in errors] == ["invalid_json", "invalid_value", "invalid_value", "invalid_value",
                                          "invalid_value", "model_not_found", "input_audio_buffer_commit_empty"]
    assert all(e["type"] == "invalid_request_error" and e["message"] for e in errors)
    assert "response.create" in errors[1]["message"] and errors[2]["param"] == "audio"
    assert "24000" in errors[4]["message"] and errors[4]["param"] == "session.audio.input.format"
    assert events[-1]["transcript"] == expected.texts[0]
    assert not any(e["type"].startswith("input_audio_buffer.speech") for e in events)


def test_a_dropped_connection_frees_its_kv_blocks(server, expected, engine):
    async def drop() -> None:
        async with client(server.url).realtime.connect(extra_query={"intent": "transcription"}) as connection:
            await connection.session.update(session={"type": "transcription",
                                                     "audio": {"input": {"turn_detection": None}}})
            for chunk in chunks(expected.pcm):
                await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            await connection.input_audio_buffer.commit()
            async for event in connection:
                if event.type == "conversation.item.input_audio_transcription.delta":
                    assert kv_blocks_in_use(engine) > 0  # the turn is decoding: it holds blocks
                    break  # and the connection closes

    asyncio.run(drop())
    deadline = time.monotonic() + 10
    while kv_blocks_in_use(engine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kv_blocks_in_use(engine) == 0 and not engine.has_unfinished_requests()


def test_the_handshake_checks_the_api_key_and_the_model(server):
    """A wrong key gets the other routes' 401 (the other tests connect with the right one), an unknown model
    OpenAI's 404; ``?model=`` naming the served model starts the session with it."""
    async def connect(key: str, **model: str) -> dict:
        async with client(server.url, key).realtime.connect(extra_query={"intent": "transcription"},
                                                            **model) as connection:
            return (await connection.recv()).to_dict()

    for key, model, status, code in (("wrong", {}, 401, "invalid_api_key"),
                                     (KEY, {"model": "no-such-model"}, 404, "model_not_found")):
        with pytest.raises(websockets.InvalidStatus) as refused:
            asyncio.run(connect(key, **model))
        assert refused.value.response.status_code == status
        assert json.loads(refused.value.response.body)["error"]["code"] == code
    created = asyncio.run(connect(KEY, model=MODEL))
    assert created["type"] == "session.created" and created["session"]["type"] == "transcription"
    assert created["session"]["audio"]["input"]["transcription"]["model"] == MODEL
