"""POST /v1/audio/transcriptions and /v1/audio/translations: an uploaded audio file through a Whisper model.

The upload is decoded (any format libsndfile reads) and resampled to 16 kHz, then runs as one engine request
with the model's default decoder prompt for the language and task. Without a ``language``, a multilingual model
first detects it (one more engine request, ``tt_models.speech``), as vLLM's and OpenAI's servers do; an
English-only model transcribes English. Whisper takes one 30 s window: longer audio is refused. Without
timestamp tokens the transcript is one segment spanning the audio.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from tt_models.audio import load_audio
from tt_models.engine.outputs import RequestOutput
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import APIError, engine_errors
from tt_models.server.protocol import (AudioResponseFormat, DurationUsage, TokenUsage, TranscriptDelta,
                                       TranscriptDone, Transcription, TranscriptionSegment, TranscriptionVerbose)
from tt_models.server.serving import finish, json_response, new_id, submit
from tt_models.server.streaming import DONE, event_stream, sse, sse_error
from tt_models.server.subtitles import Cue, srt, vtt
from tt_models.speech import DetectedLanguage, LanguageDetector

SAMPLE_RATE = 16000
MAX_UPLOAD_BYTES = 25 * 2**20  # OpenAI's upload limit


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
    if form.timestamp_granularities and "word" in form.timestamp_granularities:
        raise APIError(400, "word timestamps are not supported", param="timestamp_granularities")
    if form.stream and form.response_format not in ("json", "text"):
        raise APIError(400, f"stream=true takes response_format json or text, got {form.response_format}",
                       param="response_format")


async def create_transcription(form: AudioRequest, audio: bytes, engine: AsyncEngine, request: Request) -> Response:
    _check(form, engine)
    if len(audio) > MAX_UPLOAD_BYTES:
        raise APIError(413, f"The file is {len(audio)} bytes; the limit is {MAX_UPLOAD_BYTES}", param="file")
    with engine_errors():  # undecodable audio and bad parameters are 400s
        waveform = await run_in_threadpool(load_audio, audio, SAMPLE_RATE)
        params = SamplingParams(temperature=form.temperature, max_tokens=None,
                                logprobs=0 if form.response_format == "verbose_json" else None)
    prompt = {"prompt": "", "multi_modal_data": {"audio": (waveform, SAMPLE_RATE)}}
    response_id, _ = new_id("trsc")
    language = form.language
    if language is None and LanguageDetector.supports(engine.engine.checkpoint.generation_config):
        detected = await _detect_language(engine, prompt["multi_modal_data"]["audio"], response_id, request)
        if detected is None:
            return json_response(None)
        language = detected.language
    streams = await submit(engine, response_id, [prompt], params, language=language, task=form.task,
                           previous_text=form.prompt or None)
    if form.stream:
        return event_stream(_events(streams[0]))
    outputs = await finish(request, streams)
    if outputs is None:
        return json_response(None)
    return _response(form, outputs[0], waveform.size / SAMPLE_RATE, language or "en")


async def _detect_language(engine: AsyncEngine, audio: tuple, response_id: str,
                           request: Request) -> DetectedLanguage | None:
    """The audio's language from one engine request; None if the client left first."""
    detector = LanguageDetector(engine.engine.checkpoint.generation_config)
    streams = await submit(engine, f"{response_id}-language", [detector.prompt(audio)], detector.params)
    outputs = await finish(request, streams)
    return None if outputs is None else detector.result(outputs[0])


def _response(form: AudioRequest, output: RequestOutput, duration: float, language: str) -> Response:
    seq = output.outputs[0]
    text = seq.text.strip()
    usage = DurationUsage(seconds=duration)
    if form.response_format == "json":
        return json_response(Transcription(text=text, usage=usage))
    if form.response_format == "text":
        return PlainTextResponse(text)
    if form.response_format == "srt":
        return PlainTextResponse(srt([Cue(0.0, duration, text)]))
    if form.response_format == "vtt":
        return PlainTextResponse(vtt([Cue(0.0, duration, text)]), media_type="text/vtt")
    encoded = text.encode()
    segment = TranscriptionSegment(
        id=0, seek=0, start=0.0, end=duration, text=seq.text, tokens=seq.token_ids, temperature=form.temperature,
        avg_logprob=(seq.cumulative_logprob or 0.0) / max(len(seq.token_ids), 1),
        compression_ratio=len(encoded) / len(zlib.compress(encoded)) if encoded else 0.0)
    # OpenAI: a transcription reports the language of the audio, a translation that of its output (English).
    language = "en" if form.task == "translate" else language.lower().removeprefix("<|").removesuffix("|>")
    return json_response(TranscriptionVerbose(
        task=form.task, language=LANGUAGES.get(TO_LANGUAGE_CODE.get(language, language), language),
        duration=duration, text=text, segments=[segment], usage=usage))


async def _events(stream: RequestStream) -> AsyncIterator[str]:
    # Deltas of the stripped transcript: each stripped prefix extends the previous one, so the deltas add up
    # to the final text exactly.
    sent = 0
    output = None
    try:
        async for output in stream:
            text = output.outputs[0].text.strip()
            if len(text) > sent:
                yield sse(TranscriptDelta(delta=text[sent:]))
                sent = len(text)
        seq = output.outputs[0]
        prompt = len(output.prompt_token_ids)
        yield sse(TranscriptDone(text=seq.text.strip(), usage=TokenUsage(
            input_tokens=prompt, output_tokens=len(seq.token_ids), total_tokens=prompt + len(seq.token_ids))))
    except Exception as error:
        yield sse_error(error)
    finally:
        stream.close()
    yield DONE
