"""POST /v1/audio/transcriptions and /v1/audio/translations: an uploaded audio file through a Whisper model.

The speech logic is ``tt_models.speech``'s, as ``LLM.transcribe`` runs it: the upload (any format libsndfile
reads, any length up to the 25 MiB upload limit) is cut into windows of at most 30 s, every window is an engine
request submitted at once (beside other clients' requests), and the results are stitched. Without a ``language``
a multilingual model first detects it; an English-only model transcribes English. ``verbose_json``, ``srt`` and
``vtt`` decode with timestamp tokens into timed segments. ``temperature`` is OpenAI's: 0 (the default) decodes
greedily and falls back to ever higher temperatures on a window whose text fails openai-whisper's thresholds
(``tt_models.speech.fallback``), a temperature above 0 samples at that temperature alone. A stream sends the
transcript's text in time order as it grows: window by window (the text the response would have, as each window
is final), and, when nothing after decoding can change a window (one temperature, no silence rule), the closed
segments of the earliest unfinished window as they decode. ``timestamp_granularities[]=word`` (with
``verbose_json``, alone or with ``segment``) adds each word's start and end (``tt_models.speech.word_timestamps``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from tt_models.engine.outputs import RequestOutput
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import APIError, engine_errors
from tt_models.server.protocol import (AudioResponseFormat, DurationUsage, TokenUsage, TranscriptDelta,
                                       TranscriptDone, Transcription, TranscriptionVerbose, TranscriptionWord)
from tt_models.server.serving import finish, json_response, new_id, submit
from tt_models.server.streaming import event_stream, sse
from tt_models.server.subtitles import Cue, srt, vtt
from tt_models.server.transcription_rounds import Transcribed, growing_text
from tt_models.speech import LongFormTranscription, Transcript, TranscriptionOptions
from tt_models.speech.fallback import FALLBACK_TEMPERATURES

MAX_UPLOAD_BYTES = 25 * 2**20  # OpenAI's upload limit
TIMED_FORMATS = ("verbose_json", "srt", "vtt")  # the formats that carry segments


@dataclass(frozen=True)
class AudioRequest:
    """The form fields of both endpoints (``language`` is a tt-models extra on translations)."""

    model: str
    task: str  # "transcribe" | "translate"
    language: str | None
    prompt: str | None
    temperature: float
    response_format: AudioResponseFormat
    stream: bool
    timestamp_granularities: list[str] | None


def _check(form: AudioRequest, engine: AsyncEngine) -> None:
    if engine.engine.checkpoint.config.model_type != "whisper":
        raise APIError(400, f"{form.model} does not take audio: transcriptions need a Whisper model", param="model")
    if not 0 <= form.temperature <= 1:  # OpenAI's range (NaN fails it too)
        raise APIError(400, f"temperature must be in [0, 1], got {form.temperature}", param="temperature")
    granularities = set(form.timestamp_granularities or ())
    if granularities - {"segment", "word"}:
        raise APIError(400, f"timestamp_granularities takes 'segment' and 'word', got {sorted(granularities)}",
                       param="timestamp_granularities")
    if granularities and form.response_format != "verbose_json":  # OpenAI's rule: only verbose_json has them
        raise APIError(400, f"timestamp_granularities needs response_format verbose_json, got "
                       f"{form.response_format}", param="timestamp_granularities")
    if form.stream and form.response_format not in ("json", "text"):
        raise APIError(400, f"stream=true takes response_format json or text, got {form.response_format}",
                       param="response_format")


async def create_transcription(form: AudioRequest, audio: bytes, engine: AsyncEngine, request: Request) -> Response:
    _check(form, engine)
    if len(audio) > MAX_UPLOAD_BYTES:
        raise APIError(413, f"The file is {len(audio)} bytes; the limit is {MAX_UPLOAD_BYTES}", param="file")
    options = TranscriptionOptions(language=form.language, task=form.task, prompt=form.prompt or None,
                                   timestamps=form.response_format in TIMED_FORMATS,
                                   word_timestamps="word" in (form.timestamp_granularities or ()),
                                   temperature=form.temperature or FALLBACK_TEMPERATURES)  # OpenAI's 0
    with engine_errors():  # undecodable audio, a language or task the model does not take: 400s
        job = await run_in_threadpool(LongFormTranscription, engine.engine.processor, audio, options)
    response_id, _ = new_id("trsc")
    if not engine.engine.decodes:  # an encode instance: the requests' encoder outputs go on, nothing comes back
        return await _encode(job, engine, response_id, request)
    if form.stream:
        streams: list[RequestStream] = []
        return event_stream(_events(job, engine, response_id, streams), streams)
    transcript = await _run(job, engine, response_id, request)
    if transcript is None:
        return json_response(None)
    return _response(form, transcript)


async def _run(job: LongFormTranscription, engine: AsyncEngine, response_id: str,
               request: Request) -> Transcript | None:
    """Every batch of engine requests the transcription asks for, in turn; None if the client left first."""
    steps = job.steps()
    outputs: list[RequestOutput] | None = None
    for round_ in itertools.count():
        try:
            batch = steps.send(outputs)
        except StopIteration as done:
            return done.value
        streams = await submit(engine, f"{response_id}-{round_}", batch.prompts, batch.params)
        outputs = await finish(request, streams)
        if outputs is None:
            return None
    raise AssertionError("itertools.count() does not end")


async def _encode(job: LongFormTranscription, engine: AsyncEngine, response_id: str, request: Request) -> Response:
    """On an encode instance: the rounds of requests a prefill-decode instance will make (same ids), run for their
    encoder outputs; an empty transcript once all are handed over."""
    for round_, batch in enumerate(job.encoder_batches()):
        streams = await submit(engine, f"{response_id}-{round_}", batch.prompts, batch.params)
        if await finish(request, streams) is None:
            return json_response(None)
    return json_response(Transcription(text="", usage=DurationUsage(seconds=job.duration)))


def _response(form: AudioRequest, transcript: Transcript) -> Response:
    usage = DurationUsage(seconds=transcript.duration)
    if form.response_format == "json":
        return json_response(Transcription(text=transcript.text, usage=usage))
    if form.response_format == "text":
        return PlainTextResponse(transcript.text)
    cues = [Cue(s.start, s.end, s.text) for s in transcript.segments]
    if form.response_format == "srt":
        return PlainTextResponse(srt(cues))
    if form.response_format == "vtt":
        return PlainTextResponse(vtt(cues), media_type="text/vtt")
    granularities = set(form.timestamp_granularities or ("segment",))  # OpenAI's default: segments
    words = None if transcript.words is None else \
        [TranscriptionWord(word=w.word.strip(), start=w.start, end=w.end) for w in transcript.words]
    body = TranscriptionVerbose(task=form.task, language=transcript.language_name, duration=transcript.duration,
                                text=transcript.text, usage=usage, words=words,
                                segments=transcript.segments if "segment" in granularities else None)
    return Response(body.response_json(), media_type="application/json")


async def _events(job: LongFormTranscription, engine: AsyncEngine, response_id: str,
                  streams: list[RequestStream]) -> AsyncIterator[str]:
    """The transcript's growth as ``transcript.text.delta`` events (its text only grows, so the deltas add up to
    the final text), then ``transcript.text.done``. ``streams`` holds the round's requests, for the response to close
    (which aborts those under way)."""
    sent = ""
    async for text in growing_text(job, engine, response_id, streams):
        if isinstance(text, Transcribed):
            done = text
            break
        yield sse(TranscriptDelta(delta=text[len(sent):]))
        sent = text
    if len(done.transcript.text) > len(sent):
        yield sse(TranscriptDelta(delta=done.transcript.text[len(sent):]))
    yield sse(TranscriptDone(text=done.transcript.text, usage=TokenUsage(
        input_tokens=done.prompt_tokens, output_tokens=done.output_tokens,
        total_tokens=done.prompt_tokens + done.output_tokens)))
