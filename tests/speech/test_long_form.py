"""Long-form transcription with Whisper tiny.en (host backend, accuracy profile), against HF transformers on the
same weights and audio, in float32:

- a recording of about 2.5 minutes (six windows): 15 pieces of the real call and 17 espeak-ng sentences at known
  places, 1.5 s pauses, a -60 dBFS noise floor, sent to the server in one request (verbose_json) and streamed:
  its WER is within 2 points of HF's own long-form ``generate`` (sequential seek on timestamp tokens), every
  piece's speech starts and ends within 1 s of its segments' boundaries, and the stream gives the same text;
- a one-window clip of four pieces, with Whisper's timestamps as decoded (``vad=False``), against HF's
  ``generate(return_timestamps=True)``: with digital silence between the pieces every segment's times are HF's
  within 0.02 s; over the noise floor the tokens are HF's up to a near tie (each side's token in the other's top 5)
  and the segments before it within 0.02 s; the server's verbose_json, srt and vtt of the clip equal ``LLM``'s;
- 4 long-form requests at once (two distinct clips of two windows each) against each alone.

One engine serves every test: the offline batch runs first, then a real uvicorn server takes it over. Each HF
reference runs once, in the test that reads it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import openai
import pytest

from tests.server.cases import ServerThread
from tests.speech.longform import hf_timestamps
from tt_models import LLM
from tt_models.audio import word_error_rate
from tt_models.engine.sampling import SamplingParams
from tt_models.server import create_app
from tt_models.server.subtitles import Cue, srt, vtt
from tt_models.speech import LongFormTranscription, TranscriptionOptions, run_transcriptions, split_windows
from tt_models.testing.hf_whisper import hf_long_form
from tt_models.testing.long_recording import (LONG_LAYOUT, SAMPLE_RATE, boundary_offsets, long_recording,
                                              stray_segments, through_wav)

pytestmark = pytest.mark.slow

MODEL = "whisper-tiny.en"
BATCH = 4  # long-form requests at once (their 8 windows fill the engine's slots)
SLOTS = 8  # the engine's: a decode step costs the same for 1 row or 32 on the host, so windows batch
LAYOUT = LONG_LAYOUT[:32]  # the first 2.5 minutes of the bench's 4-minute recording (bench/whisper_long_form.py)
CLIP_LAYOUT = ("s0", 2, "s2", "s3")  # the one-window clip: sentences and a call piece (longform's names)
CLIP_SECONDS = 32  # the batched test's clips: two windows each
DISTINCT = 2  # distinct clips among the requests (each also runs alone: one sequential run each)
WER_POINTS = 0.02  # the engine's WER may exceed HF long-form's by at most 2 points
BOUNDARY_SECONDS = 1.0  # each piece's start and end against its segments'
# Segment times against HF generate(return_timestamps=True): measured 0.00 (every time equal); one timestamp step
# (0.02 s, their resolution, and float rounding) lets a tie between two neighbouring timestamps pass.
TIMESTAMP_SECONDS = 0.021


@pytest.fixture(scope="session")
def recordings(tmp_path_factory):
    """(recording, wav, samples) of the long recording, of the one-window clip, and of the clip without the noise
    floor (its pauses digital silence)."""
    directory = tmp_path_factory.mktemp("espeak")
    made = (long_recording(directory, LAYOUT), long_recording(directory, CLIP_LAYOUT),
            long_recording(directory, CLIP_LAYOUT, noise_dbfs=None))
    return [(recording, *through_wav(recording.waveform)) for recording in made]


@pytest.fixture(scope="module")
def recording(recordings):
    return recordings[0]


@pytest.fixture(scope="module")
def clip(recordings):
    return recordings[1]


@pytest.fixture(scope="module")
def quiet_clip(recordings):
    return recordings[2]


@pytest.fixture(scope="module")
def llm():
    with LLM(MODEL, max_num_seqs=SLOTS, max_num_batched_tokens=SLOTS * 1501, backend="host",
             optimizations="accuracy") as llm:
        yield llm


def batch_clips(samples: np.ndarray, pieces) -> list[np.ndarray]:
    """Distinct two-window clips of the recording, each starting 0.5 s before one of its first pieces."""
    starts = [round((p.start - 0.5) * SAMPLE_RATE) for p in pieces[:DISTINCT]]
    return [samples[a:a + CLIP_SECONDS * SAMPLE_RATE] for a in starts]


@pytest.fixture(scope="module")
def offline(llm, recording, clip, quiet_clip):
    """One batch: the clip with segments (vad on, the default, and off), the quiet clip with segments (vad off),
    and 4 requests of two-window clips of the recording; then each of those clips alone."""
    processor = llm.llm_engine.processor
    timed = TranscriptionOptions(timestamps=True)
    clips = batch_clips(recording[2], recording[0].pieces)
    jobs = [LongFormTranscription(processor, (clip[2], SAMPLE_RATE), timed),
            LongFormTranscription(processor, (clip[2], SAMPLE_RATE), replace(timed, vad=False)),
            LongFormTranscription(processor, (quiet_clip[2], SAMPLE_RATE), replace(timed, vad=False)),
            *(LongFormTranscription(processor, (clips[i % DISTINCT], SAMPLE_RATE)) for i in range(BATCH))]
    single, raw, quiet, *together = run_transcriptions(llm.llm_engine, jobs)
    alone = [llm.transcribe((c, SAMPLE_RATE)) for c in clips]
    return single, raw, quiet, together, alone


def agree_until_a_difference(llm, samples: np.ndarray, ours, hf) -> int | None:
    """Checks ``ours`` (a Transcript with Whisper's own timestamps) against HF's ``generate``: the tokens are equal
    up to the first difference, where each side's token is in the other's top 5, and the segments' starts and
    ends before it are HF's within 0.02 s. Returns the index of the first different token (None: no difference)."""
    tokens = [t for s in ours.segments for t in s.tokens]
    differ = next((i for i, (a, b) in enumerate(zip(tokens, hf.tokens)) if a != b), None)
    if differ is None:
        assert tokens == hf.tokens
    else:  # the engine's top 5 at that step, with the same tokens before it
        prompt = llm.llm_engine.processor.whisper_prompt_ids(timestamps=True) + tokens[:differ]
        [step] = llm.generate([{"prompt_token_ids": prompt, "multi_modal_data": {"audio": (samples, SAMPLE_RATE)}}],
                              SamplingParams(temperature=0.0, max_tokens=1, logprobs=5), use_tqdm=False)
        top5 = step.outputs[0].logprobs[0]  # raw logprobs, as HF's top 5 are of raw logits
        assert tokens[differ] in top5 and hf.tokens[differ] in top5 and tokens[differ] in hf.top5[differ]
    ends = np.cumsum([len(s.tokens) for s in ours.segments])  # each segment's end timestamp is token ends[i] - 1
    before = len(tokens) if differ is None else differ
    starts = [(s.start, start) for s, (start, _, _), end in zip(ours.segments, hf.segments, ends)
              if end - len(s.tokens) < before]
    closed = [(s.end, end) for s, (_, end, _), at in zip(ours.segments, hf.segments, ends) if at <= before]
    assert len(starts) >= 2 and closed
    assert all(abs(a - b) <= TIMESTAMP_SECONDS for a, b in starts + closed), (starts, closed)
    return differ


def test_timestamps_agree_with_hf_generate(llm, offline, clip, quiet_clip):
    """Whisper's own timestamps (vad=False) against HF float32 generate(return_timestamps=True) on a clip of four
    pieces. With digital silence between the pieces every segment's times are HF's within 0.02 s (the text may
    differ in a near tie). Over a -60 dBFS noise floor the tokens are HF's up to a near tie between a timestamp and
    a text token (the engine's bf16 weights against float32), the segments before it within 0.02 s. With the default
    vad=True the tokens and text are the same and the times move in."""
    single, raw, quiet = offline[0], offline[1], offline[2]
    hf_quiet, hf_noisy = hf_timestamps(MODEL, [quiet_clip[2], clip[2]])
    agree_until_a_difference(llm, quiet_clip[2], quiet, hf_quiet)
    assert len(quiet.segments) == len(hf_quiet.segments) >= 4
    for segment, (start, end, _) in zip(quiet.segments, hf_quiet.segments):
        assert abs(segment.start - start) <= TIMESTAMP_SECONDS and abs(segment.end - end) <= TIMESTAMP_SECONDS
    agree_until_a_difference(llm, clip[2], raw, hf_noisy)
    assert [(s.text, s.tokens) for s in single.segments] == [(s.text, s.tokens) for s in raw.segments]
    assert all(r.start <= s.start <= s.end <= r.end for s, r in zip(single.segments, raw.segments))


def test_four_long_form_requests_at_once_equal_each_alone(offline):
    together, alone = offline[3], offline[4]
    assert all(len({s.seek for s in t.segments}) >= 2 for t in alone)  # segments from two windows each, at least
    for i, transcript in enumerate(together):
        reference = alone[i % DISTINCT]
        assert transcript.text == reference.text
        assert [(s.start, s.end, s.tokens) for s in transcript.segments] == \
            [(s.start, s.end, s.tokens) for s in reference.segments]


@pytest.fixture(scope="module")
def served(llm, offline, recording, clip):
    """Through a real server at once: the long recording in one request with segments (verbose_json) and streamed,
    the clip as verbose_json, srt and vtt."""
    with ServerThread(create_app({MODEL: llm.llm_engine})) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=1800)
        upload = ("long.wav", recording[1], "audio/wav")
        clip_wav = ("clip.wav", clip[1], "audio/wav")

        def create(file, **kwargs):
            return client.audio.transcriptions.create(model=MODEL, file=file, **kwargs)

        with ThreadPoolExecutor(5) as pool:
            futures = [pool.submit(create, upload, response_format="verbose_json",
                                   timestamp_granularities=["segment"]),
                       pool.submit(lambda: list(create(upload, stream=True))),
                       pool.submit(create, clip_wav, response_format="verbose_json",
                                   timestamp_granularities=["segment"]),
                       pool.submit(create, clip_wav, response_format="srt"),
                       pool.submit(create, clip_wav, response_format="vtt")]
            return [f.result() for f in futures]


def test_long_recording_against_hf_long_form(served, recording):
    """The recording in one request: WER within 2 points of HF's long-form generate; every piece's speech starts
    and ends within 1 s of its segments' boundaries; no segment in a pause; every window cut in a pause; the
    server's default temperature fallback decodes no window again (HF's reference is greedy)."""
    placed, samples, long = recording[0], recording[2], served[0]
    [hf] = hf_long_form(MODEL, [samples])
    ours_wer, hf_wer = word_error_rate(placed.reference, long.text), word_error_rate(placed.reference, hf.text)
    assert ours_wer <= hf_wer + WER_POINTS, (ours_wer, hf_wer)
    assert all(s.temperature == 0.0 for s in long.segments)
    times = [(s.start, s.end) for s in long.segments]
    assert all(a[1] <= b[0] for a, b in zip(times, times[1:])) and times[-1][1] <= placed.duration
    offsets = boundary_offsets(placed.pieces, times)
    worst = max(abs(t) for o in offsets if o is not None for t in o)
    print(f"\n{placed.duration:.1f} s, {len(placed.pieces)} pieces: WER ours {ours_wer:.4f}, HF {hf_wer:.4f}; "
          f"largest boundary offset {worst:.2f} s")
    off = [(p.start, p.end, o) for p, o in zip(placed.pieces, offsets)
           if o is None or max(abs(o[0]), abs(o[1])) > BOUNDARY_SECONDS]
    assert off == [], (off, times)
    assert stray_segments(placed.pieces, times) == []
    windows = split_windows(samples, SAMPLE_RATE)
    assert len(windows) >= 5 and all(placed.in_pause(w.end / SAMPLE_RATE) for w in windows[:-1])


def test_the_server_transcribes_long_audio_streamed_and_not(served, offline, recording):
    long, events, verbose, subtitles, web = served
    single = offline[0]
    assert long.language == "english" and long.duration == pytest.approx(recording[0].duration, abs=0.01)
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == long.text
    assert events[-1].type == "transcript.text.done" and events[-1].text == long.text
    assert verbose.language == "english" and verbose.text == single.text
    assert [(s.start, s.end, s.text, s.tokens) for s in verbose.segments] == \
        [(s.start, s.end, s.text, s.tokens) for s in single.segments]
    assert all(s.no_speech_prob is not None for s in verbose.segments)
    cues = [Cue(s.start, s.end, s.text) for s in single.segments]
    assert subtitles == srt(cues) and web == vtt(cues) and subtitles.count(" --> ") == len(cues) > 1
