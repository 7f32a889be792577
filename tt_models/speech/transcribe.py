"""Long-form transcription: one audio of any length as batches of ordinary engine requests, stitched into one
transcript.

The audio is cut into windows of at most 30 s at low-energy points (``windows.py``), and each window is one Whisper
request (``multi_modal_data={"audio": (window, 16000)}``) whose decoder prompt comes from the engine's
``InputProcessor.whisper_prompt_ids``. The windows are known before anything is decoded, so all of them go to the
engine as one batch, with the windows of other audios beside them; with ``condition_on_previous_text`` each window
waits for the text before it (``<|startofprev|>``), one window per batch. A window whose text fails the thresholds
of ``fallback.py`` goes into the next batch again, at the next temperature.

A :class:`LongFormTranscription` does no I/O: :meth:`~LongFormTranscription.steps` is a generator that yields each
:class:`EngineBatch` to run and is sent back its finished outputs, in order, and returns the :class:`Transcript`.
``run_transcriptions`` drives many of them over an ``LLMEngine`` (``LLM.transcribe``); the server drives them over
its async engine. Steps, for a multilingual checkpoint: a language-detection request (``language.py``) for the
first window when no language is given, for every window when segments are asked for (the same request scores
``<|nospeech|>`` after ``<|startoftranscript|>``, openai-whisper's ``no_speech_prob``); then the windows (and, for
a window preempted as it finished, the one-token request that gives its words' weights, ``word_timestamps.py``).
"""

from __future__ import annotations

import itertools
import math
import uuid
import zlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

from tt_models.engine.inputs import InputProcessor, audio_waveform
from tt_models.engine.outputs import CompletionOutput, RequestOutput
from tt_models.engine.prompts import TokensPrompt
from tt_models.engine.sampling import SamplingParams
from tt_models.speech.fallback import (FALLBACK_TEMPERATURES, HOT_TEMPERATURE, is_silence, needs_fallback,
                                       temperatures)
from tt_models.speech.language import LanguageDetector, no_speech_token_id
from tt_models.speech.timestamps import TimedText, WindowSegments, parse_segments
from tt_models.speech.vad import SpeechActivity
from tt_models.speech.windows import Window, split_windows
from tt_models.speech.word_timestamps import Word, alignment_heads, output_words, realignment_request

SAMPLE_RATE = 16000
HOP_LENGTH = 160  # samples per mel frame: a segment's ``seek`` counts them, as openai-whisper's does
MIN_REST_SECONDS = 2.0  # an unfinished rest of a window this long or longer is decoded again


@dataclass(eq=False)
class _Slot:
    """A stretch of the audio decoded by one request: a window or an unfinished window's rest."""

    window: Window
    no_speech_prob: float | None
    segments: list[Segment] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    done: bool = False
    attempt: int = 0  # the index of the temperature it is decoded at
    judged: tuple[RequestOutput, _Verdict] | None = None  # its last final output and verdict (a stream asks first)
    unaligned: tuple[RequestOutput, bool] | None = None  # a final output without alignment weights, and closed_only


@dataclass(frozen=True)
class _Verdict:
    """A window's final output judged: decoded again (``retry``), or its pieces (none: silence) and the window of
    its unfinished rest; the figures its segments report."""

    retry: bool
    pieces: list[TimedText]
    rest: Window | None
    compression_ratio: float
    avg_logprob: float
    no_speech_prob: float | None


@dataclass(frozen=True)
class TranscriptionOptions:
    """``language``: a code, name or token (None: detected by a multilingual checkpoint, English otherwise);
    ``task``: "transcribe" or "translate" (to English); ``timestamps``: decode with timestamp tokens into timed
    segments; ``prompt``: earlier text for the first window; ``condition_on_previous_text``: each later window is
    conditioned on the transcript before it (then the windows of one audio run one after another); ``vad``: each
    segment's start and end move in to the speech inside it (``vad.py``; False: Whisper's timestamps as decoded);
    ``word_timestamps``: each word's start and end too (``word_timestamps.py``; decodes with timestamp tokens).
    ``temperature``: one temperature, or those to try in turn on a window whose text fails the thresholds
    (``fallback.py``; a threshold None is not checked), openai-whisper's defaults."""

    language: str | None = None
    task: Literal["transcribe", "translate"] = "transcribe"
    timestamps: bool = False
    condition_on_previous_text: bool = False
    prompt: str | None = None
    temperature: float | tuple[float, ...] = FALLBACK_TEMPERATURES
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    vad: bool = True
    word_timestamps: bool = False


@dataclass(frozen=True)
class Segment:
    """A timed piece of the transcript, with OpenAI's ``verbose_json`` fields; ``avg_logprob``,
    ``compression_ratio`` and ``no_speech_prob`` are those of the window the segment came from (as openai-whisper
    reports them), ``no_speech_prob`` None without timestamps. ``seek`` is the window's start in mel frames."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float | None


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str  # the code of the audio's language ("en", "de", ...)
    duration: float  # seconds of audio
    segments: list[Segment]
    task: str = "transcribe"
    words: list[Word] | None = None  # with word_timestamps (Whisper's own times, as HF's pipeline gives them)

    @property
    def language_name(self) -> str:
        """The language as OpenAI's ``verbose_json`` names it (``german``); a translation's is ``english``."""
        return LANGUAGES["en" if self.task == "translate" else self.language]


@dataclass(frozen=True)
class EngineBatch:
    """Requests to run together: the prompts and their parameters, one each; ``windows`` marks the transcription
    requests (their text is the transcript's, in order), as against language detection."""

    prompts: list[TokensPrompt]
    params: list[SamplingParams]
    windows: bool = False


Steps = Generator[EngineBatch, list[RequestOutput], Transcript]


class LongFormTranscription:
    """One audio (``(waveform, rate)``, a 16 kHz waveform or file bytes) through a Whisper engine's input processor.
    Raises ValueError for audio that is not audio, and for a language or task the checkpoint does not take."""

    def __init__(self, processor: InputProcessor, audio: Any, options: TranscriptionOptions | None = None) -> None:
        if not getattr(processor, "is_whisper", False):
            raise ValueError("Transcription needs a Whisper model")
        self.processor = processor
        self.options = options = options or TranscriptionOptions()
        self.temperatures = temperatures(options.temperature)
        self.waveform = audio_waveform(audio, SAMPLE_RATE)
        self.windows: list[Window] = split_windows(self.waveform, SAMPLE_RATE)
        config = processor.generation_config
        self.multilingual = LanguageDetector.supports(config)
        processor.whisper_prompt_ids(options.language, options.task)  # refuses a bad language or task now
        self.alignment_heads = alignment_heads(config) if options.word_timestamps else None
        self.eos_token_id: int = config.eos_token_id
        # openai-whisper's sample_len: a window's text never comes near it, a runaway (hot) decode stops there.
        self.max_window_tokens: int = processor.hf_config.max_target_positions // 2
        self.timestamp_begin: int = config.no_timestamps_token_id + 1
        self.no_speech_token_id = no_speech_token_id(config)
        self.language = options.language
        self.slots: list[_Slot] = []  # what is decoded, in time order (steps fills it)
        self._current: list[_Slot] = []  # the slots of the batch being decoded
        self._activity: SpeechActivity | None = None  # the audio's frame energies, when a segment is trimmed

    @property
    def duration(self) -> float:
        return self.waveform.size / SAMPLE_RATE

    def steps(self) -> Steps:
        options = self.options
        language = options.language
        no_speech: list[float | None] = [None] * len(self.windows)
        if self.multilingual and (language is None or options.timestamps):
            detector = LanguageDetector(self.processor.generation_config, no_speech=options.timestamps)
            scored = self.windows if options.timestamps else self.windows[:1]
            outputs = yield EngineBatch([detector.prompt(self._audio(w)) for w in scored],
                                        [detector.params] * len(scored))
            if language is None:
                language = detector.result(outputs[0]).language
            if options.timestamps:
                no_speech = [detector.no_speech_prob(o) for o in outputs]
        self.language = _language_code(language or "en")
        self.slots = [_Slot(w, p) for w, p in zip(self.windows, no_speech)]
        pending = list(self.slots)
        while pending:  # the windows, then those to decode again and the rest of each left unfinished, until none is
            batch = pending[:1] if options.condition_on_previous_text else pending
            self._current = batch
            outputs = yield EngineBatch([self._window_prompt(slot) for slot in batch],
                                        [self._params(slot) for slot in batch], True)
            pending = [tail for slot, output in zip(batch, outputs) for tail in self._finish(slot, output)] + \
                pending[len(batch):]
            yield from self._realign([slot for slot in batch if slot.unaligned is not None])
        self._current = []
        segments = [segment for slot in self.slots for segment in slot.segments]
        words = [word for slot in self.slots for word in slot.words] if options.word_timestamps else None
        return Transcript(self.text(), self.language, self.duration,
                          [replace(segment, id=i) for i, segment in enumerate(segments)], options.task, words)

    def encoder_batches(self) -> list[EngineBatch]:
        """The batches :meth:`steps` yields whose encoder inputs follow from the audio alone, in the same order and
        rounds: language detection (when it runs), then the windows (one per round when conditioning on previous
        text). An encode instance (``tt_models.disagg``) runs these; its outputs carry no tokens and are not read.
        The rest of a window left unfinished, and a window decoded again at a higher temperature, depend on
        decoding: the prefill-decode instance encodes them itself."""
        options, batches = self.options, []
        if self.multilingual and (options.language is None or options.timestamps):
            detector = LanguageDetector(self.processor.generation_config, no_speech=options.timestamps)
            scored = self.windows if options.timestamps else self.windows[:1]
            batches.append(EngineBatch([detector.prompt(self._audio(w)) for w in scored],
                                       [detector.params] * len(scored)))
        self.language = _language_code(options.language or "en")  # the decoder prompt does not reach an encoder
        slots = [_Slot(w, None) for w in self.windows]
        groups = [[slot] for slot in slots] if options.condition_on_previous_text else [slots]
        batches += [EngineBatch([self._window_prompt(slot) for slot in group], [self._params(slot) for slot in group],
                                True) for group in groups]
        return batches

    def text(self, live: Sequence[RequestOutput | None] = ()) -> str:
        """The transcript so far, in time order: finished windows, then the first unfinished one's (``live``: the
        latest outputs of the last batch's requests, in order): its text once its output is final (not to be
        decoded again), or, when nothing after decoding can change a window (one temperature, no silence rule), its
        closed segments as they decode. It only grows, and ends as the transcript: a stream says what the response
        would."""
        parts: list[str] = []
        latest = dict(zip(map(id, self._current), live))
        for slot in self.slots:
            if slot.done:
                parts += [s.text for s in slot.segments]
                continue
            output = latest.get(id(slot))
            if output is None or not output.finished:
                if output is not None and self._kept_as_decoded:
                    parts += [s.text for s in self._read(slot, output, final=False).segments]
                break
            verdict = self._judge(slot, output)
            if verdict.retry:
                break
            parts += [p.text for p in verdict.pieces]
            if verdict.rest is not None:  # decoded next, after this batch
                break
        return "".join(parts).strip()

    # ------------------------------------------------------------------------------------------------ requests

    def _audio(self, window: Window) -> tuple[np.ndarray, int]:
        return self.waveform[window.start:window.end], SAMPLE_RATE

    def _window_prompt(self, slot: _Slot) -> TokensPrompt:
        options = self.options
        previous = options.prompt if slot.window.start == 0 else None
        if options.condition_on_previous_text:
            # As openai-whisper and HF: a window decoded hot conditions no later one, nor does the text before it.
            done = list(itertools.takewhile(lambda s: s.done, self.slots))
            hot = [i for i, s in enumerate(done) if self.temperatures[s.attempt] >= HOT_TEMPERATURE]
            text = "".join(seg.text for s in done[hot[-1] + 1 if hot else 0:] for seg in s.segments).strip()
            previous = " ".join(t for t in [None if hot else options.prompt, text] if t and t.strip()) or None
        ids = self.processor.whisper_prompt_ids(self.language, options.task, timestamps=self.timestamps,
                                                previous_text=previous)
        return {"prompt_token_ids": ids, "multi_modal_data": {"audio": self._audio(slot.window)}}

    @property
    def _kept_as_decoded(self) -> bool:
        """Every window's text is kept as decoded: no fallback, and no silence rule that could drop it."""
        return len(self.temperatures) == 1 and self.options.no_speech_threshold is None

    @property
    def timestamps(self) -> bool:
        """Timestamp tokens when segments or words are asked for, and always for long audio: they tell where a
        window's decoding stopped short (as HF and openai-whisper decode long-form)."""
        return self.options.timestamps or self.options.word_timestamps or len(self.windows) > 1

    def _params(self, slot: _Slot) -> SamplingParams:
        """The slot's temperature, and its start sample as the seed: sampled text depends on the audio alone, not
        on what runs beside it. Logprobs of the sampled tokens (``avg_logprob``); an English-only checkpoint's
        timestamp prompt ends at ``<|startoftranscript|>``, so its first step also scores ``<|nospeech|>``."""
        no_speech_here = self.timestamps and not self.multilingual
        extra = {"timestamps": True, "alignment_heads": self.alignment_heads} if self.alignment_heads else \
            {"timestamps": True} if self.timestamps else None
        return SamplingParams(temperature=self.temperatures[slot.attempt], seed=slot.window.start,
                              max_tokens=self.max_window_tokens,
                              logprobs=None if no_speech_here else 0,
                              logprob_token_ids=[self.no_speech_token_id] if no_speech_here else None,
                              extra_args=extra)

    # ------------------------------------------------------------------------------------------------ results

    def _decode(self, token_ids: list[int]) -> str:
        return self.processor.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _read(self, slot: _Slot, output: RequestOutput, final: bool) -> WindowSegments:
        seq = output.outputs[0]
        start, end = slot.window.seconds(SAMPLE_RATE)
        if not self.timestamps:  # one window, one segment: the engine's own text
            tokens = [t for t in seq.token_ids if t != self.eos_token_id]
            return WindowSegments([TimedText(start, end, tokens, seq.text)] if seq.text.strip() else [], None)
        return parse_segments(seq.token_ids, timestamp_begin=self.timestamp_begin, eos_token_id=self.eos_token_id,
                              offset=start, duration=end - start, decode=self._decode, final=final)

    def _no_speech_prob(self, slot: _Slot, seq: CompletionOutput) -> float | None:
        """An English-only checkpoint's from the request's first step, a multilingual one's from detection."""
        if self.timestamps and not self.multilingual:
            return math.exp(seq.logprobs[0][self.no_speech_token_id].logprob)
        return slot.no_speech_prob

    def _judge(self, slot: _Slot, output: RequestOutput) -> _Verdict:
        """What a window's final output comes to, as openai-whisper and HF judge it (on the whole output's text and
        logprobs, which its segments also report): decoded again at the next temperature, silence (no pieces), or
        its pieces and the stretch left unfinished, if long enough to decode again."""
        if slot.judged is not None and slot.judged[0] is output:
            return slot.judged[1]
        seq = output.outputs[0]
        ratio = compression_ratio(self._decode([t for t in seq.token_ids if t < self.eos_token_id]))
        avg_logprob = (seq.cumulative_logprob or 0.0) / max(len(seq.token_ids), 1)
        no_speech_prob = self._no_speech_prob(slot, seq)
        verdict = _Verdict(False, [], None, ratio, avg_logprob, no_speech_prob)
        if is_silence(self.options, avg_logprob, no_speech_prob):  # HF's should_skip: seek past the window
            pass
        elif slot.attempt < len(self.temperatures) - 1 and needs_fallback(self.options, ratio, avg_logprob):
            verdict = replace(verdict, retry=True)
        else:
            read = self._read(slot, output, final=True)
            window = slot.window
            if read.resume_at is not None and read.resume_at > 0 and \
                    window.end - window.start - read.resume_at * SAMPLE_RATE >= MIN_REST_SECONDS * SAMPLE_RATE:
                verdict = replace(verdict, pieces=read.segments,
                                  rest=Window(window.start + round(read.resume_at * SAMPLE_RATE), window.end))
            else:
                verdict = replace(verdict, pieces=[*read.segments, *([read.rest] if read.rest is not None else [])])
        slot.judged = output, verdict
        return verdict

    def _finish(self, slot: _Slot, output: RequestOutput) -> list[_Slot]:
        """Record a window's final output; returns what to decode next for it: the window again at the next
        temperature when its text fails the thresholds, else the request for its unfinished rest, if any (inserted
        after it in time order). Silence leaves no segments."""
        verdict = self._judge(slot, output)
        if verdict.retry:
            slot.attempt += 1
            return [slot]
        slot.done = True
        slot.segments = [Segment(0, slot.window.start // HOP_LENGTH, *self._times(p), p.text, p.tokens,
                                 self.temperatures[slot.attempt], verdict.avg_logprob, verdict.compression_ratio,
                                 verdict.no_speech_prob) for p in verdict.pieces]
        if self.alignment_heads and verdict.pieces:
            if output.outputs[0].alignment_weights is None:  # preempted as it finished: see _realign
                slot.unaligned = output, verdict.rest is not None
            else:
                slot.words = self._words(slot, output, verdict.rest is not None)
        if verdict.rest is None:
            return []
        rest = _Slot(verdict.rest, slot.no_speech_prob)
        self.slots.insert(self.slots.index(slot) + 1, rest)
        return [rest]

    def _words(self, slot: _Slot, output: RequestOutput, closed_only: bool, weights: Any = None) -> list[Word]:
        window = slot.window
        return output_words(output, self.processor.tokenizer,
                            median_filter_width=self.processor.hf_config.median_filter_width,
                            timestamp_begin=self.timestamp_begin, offset=window.start / SAMPLE_RATE,
                            samples=window.end - window.start, language=self.language, closed_only=closed_only,
                            weights=weights)

    def _realign(self, slots: list[_Slot]) -> Generator[EngineBatch, list[RequestOutput], None]:
        """The words of windows whose final output came without alignment weights (preempted between their last
        token and the engine's commit): their weights from one-token requests over the same audio and tokens
        (``realignment_request``), one batch."""
        if not slots:
            return
        requests = [realignment_request(slot.unaligned[0], self._audio(slot.window), self.alignment_heads)
                    for slot in slots]
        outputs = yield EngineBatch([prompt for prompt, _ in requests], [params for _, params in requests])
        for slot, realigned in zip(slots, outputs):
            slot.words = self._words(slot, *slot.unaligned, weights=realigned.outputs[0].alignment_weights)
            slot.unaligned = None

    def _times(self, piece: TimedText) -> tuple[float, float]:
        """A segment's start and end (ms precision): moved in to its speech with ``vad``."""
        start, end = piece.start, piece.end
        if self.options.vad:
            if self._activity is None:
                self._activity = SpeechActivity(self.waveform, SAMPLE_RATE)
            start, end = self._activity.trim(start, end)
        return round(start, 3), round(end, 3)


def compression_ratio(text: str) -> float:
    """openai-whisper's gzip compression ratio of the text (high for repetitive text, a sign of a decoding loop)."""
    encoded = text.encode()
    return len(encoded) / len(zlib.compress(encoded)) if encoded else 0.0


def _language_code(language: str) -> str:
    """``"de"``, ``"german"`` or ``"<|de|>"`` as ``"de"``."""
    code = language.lower().removeprefix("<|").removesuffix("|>")
    return TO_LANGUAGE_CODE.get(code, code)


# ---------------------------------------------------------------------------------------------------- driver


@dataclass
class _Job:
    steps: Steps
    batch: EngineBatch | None = None
    outputs: dict[str, RequestOutput] = field(default_factory=dict)
    request_ids: list[str] = field(default_factory=list)
    transcript: Transcript | None = None


def run_transcriptions(engine: Any, transcriptions: Sequence[LongFormTranscription]) -> list[Transcript]:
    """Run every transcription over ``engine`` (an ``LLMEngine``) at once: each batch a transcription yields is
    added as soon as it is known, so windows of different audios share engine steps. The engine should have no
    other requests; on any error the transcriptions' requests are aborted."""
    prefix = f"transcribe-{uuid.uuid4().hex[:8]}"
    counter = itertools.count()
    jobs = [_Job(t.steps()) for t in transcriptions]
    owner: dict[str, _Job] = {}

    def advance(job: _Job, outputs: list[RequestOutput] | None) -> None:
        try:
            job.batch = job.steps.send(outputs)
        except StopIteration as done:
            job.transcript = done.value
            return
        job.outputs, job.request_ids = {}, []
        for prompt, params in zip(job.batch.prompts, job.batch.params):
            request_id = f"{prefix}-{next(counter)}"
            engine.add_request(request_id, prompt, params)
            job.request_ids.append(request_id)
            owner[request_id] = job

    try:
        for job in jobs:
            advance(job, None)
        while owner:
            for output in engine.step():
                job = owner.get(output.request_id) if output.finished else None
                if job is None:
                    continue
                del owner[output.request_id]
                job.outputs[output.request_id] = output
                if len(job.outputs) == len(job.request_ids):
                    advance(job, [job.outputs[r] for r in job.request_ids])
    except BaseException:
        for request_id in owner:
            engine.abort_request(request_id)
        raise
    return [job.transcript for job in jobs]
