"""Turn detection and the Realtime input audio, without a model: the turns do not depend on how the audio is chunked,
and G.711 and PCM16 arrive as libsndfile and soxr decode and resample the whole stream at once."""

from __future__ import annotations

import io

import numpy as np
import soundfile
import soxr

from tt_models.speech.realtime_audio import AudioFormat, InputAudio
from tt_models.speech.turns import TurnDetection, TurnDetector, TurnEnded

RATE = 16000


def tones() -> np.ndarray:
    """0.4 s of silence, 0.8 s of tone, a 0.3 s pause (shorter than the silence), 0.5 s of tone, 1 s of silence, 0.6 s
    of tone, 0.8 s of silence: two turns."""
    t = np.arange(RATE) / RATE
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    parts = [0.4, tone[:int(0.8 * RATE)], 0.3, tone[:RATE // 2], 1.0, tone[:int(0.6 * RATE)], 0.8]
    return np.concatenate([np.zeros(int(p * RATE), np.float32) if isinstance(p, float) else p for p in parts])


def detect(waveform: np.ndarray, sizes: list[int]) -> list:
    detector, events, at = TurnDetector(TurnDetection()), [], 0
    for size in sizes:
        chunk = waveform[at:at + size]
        at += chunk.size
        events += detector.feed(chunk, at)
    return events


def test_turns_do_not_depend_on_the_chunks():
    waveform = tones()
    whole = detect(waveform, [waveform.size])
    ends = [e for e in whole if isinstance(e, TurnEnded)]
    # Tones at 0.4-1.2, 1.5-2.0 and 3.0-3.6 s: speech from the first 20 ms frame that overlaps a tone (10 ms before it)
    # to the end of the last (10 ms after it), less 300 ms of padding, plus 500 ms of silence.
    assert [(e.audio_start, e.audio_end) for e in ends] == [(int(0.09 * RATE), int(2.51 * RATE)),
                                                            (int(2.69 * RATE), int(4.11 * RATE))]
    sizes = np.random.default_rng(0).integers(1, 3000, size=waveform.size // 100)
    assert detect(waveform, list(sizes)) == whole
    assert detect(waveform, [1600] * (waveform.size // 1600 + 1)) == whole


def test_input_audio_decodes_and_resamples_as_the_whole_stream():
    samples = (np.random.default_rng(1).standard_normal(24000) * 0.1).astype(np.float32)
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    audio = InputAudio()
    for at in range(0, len(pcm), 4801):  # odd sizes: a sample split between two appends
        audio.append(pcm[at:at + 4801])
    expected = soxr.resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768, 24000, RATE, quality="HQ")
    got = audio.take(0, audio.end)
    assert got.size > expected.size - 400 and np.array_equal(got, expected[:got.size])

    ulaw = io.BytesIO()
    soundfile.write(ulaw, samples[:8000], 8000, format="RAW", subtype="ULAW")
    audio = InputAudio(AudioFormat.parse({"type": "audio/pcmu"}))
    audio.append(ulaw.getvalue())
    decoded = soundfile.read(io.BytesIO(ulaw.getvalue()), dtype="float32", format="RAW", subtype="ULAW",
                             samplerate=8000, channels=1)[0]
    got = audio.take(0, audio.end)
    assert np.array_equal(got, soxr.resample(decoded, 8000, RATE, quality="HQ")[:got.size]) and got.size > 14500
