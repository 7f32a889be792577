"""Segment times moved in to the speech inside them (``tt_models.speech.vad``), without a model."""

from __future__ import annotations

import numpy as np
import pytest

from tt_models.speech.vad import PAD_SECONDS, SpeechActivity

RATE = 16000


def burst_audio(noise_dbfs: float | None) -> np.ndarray:
    """10 s: "speech" (a 220 Hz tone with a 5 Hz syllable envelope, -20 dBFS) from 2.0 to 4.5 s and from 6.25 to
    8.0 s, a click at 1.0 s, over a white-noise floor (or digital silence)."""
    rng = np.random.default_rng(0)
    t = np.arange(10 * RATE) / RATE
    audio = np.zeros_like(t) if noise_dbfs is None else rng.standard_normal(t.size) * 10 ** (noise_dbfs / 20)
    speech = 0.14 * np.sin(2 * np.pi * 220 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 5 * t))
    for start, end in ((2.0, 4.5), (6.25, 8.0)):
        inside = (t >= start) & (t < end)
        audio[inside] += speech[inside]
    audio[RATE:RATE + 80] += 0.3  # 5 ms: shorter than the 30 ms speech needs
    return audio.astype(np.float32)


@pytest.mark.parametrize("noise", [None, -60.0])
def test_segments_move_in_to_their_speech(noise):
    activity = SpeechActivity(burst_audio(noise), RATE)
    start, end = activity.trim(0.0, 5.0)  # a tiled segment: starts in the pause (past a click), ends in the next
    assert start == pytest.approx(2.0 - PAD_SECONDS, abs=0.02) and end == pytest.approx(4.5 + PAD_SECONDS, abs=0.02)
    start, end = activity.trim(5.0, 10.0)
    assert start == pytest.approx(6.25 - PAD_SECONDS, abs=0.02) and end == pytest.approx(8.0 + PAD_SECONDS, abs=0.02)


def test_times_only_move_in():
    activity = SpeechActivity(burst_audio(-60.0), RATE)
    assert activity.trim(3.0, 4.0) == (3.0, 4.0)  # speech throughout
    assert activity.trim(2.5, 6.0) == pytest.approx((2.5, 4.5 + PAD_SECONDS), abs=0.02)  # starts inside speech
    assert activity.trim(8.5, 9.5) == pytest.approx((8.5, 9.5))  # only noise: nothing quieter to move past
    assert activity.trim(9.99, 10.0) == (9.99, 10.0)  # too short to tell


def test_a_sliver_of_the_next_utterance_is_left_to_it():
    activity = SpeechActivity(burst_audio(-60.0), RATE)
    # a segment running late: its speech ends at 4.5 s, and it ends 0.15 s into the next utterance (6.25 s)
    assert activity.trim(1.5, 6.4) == pytest.approx((2.0 - PAD_SECONDS, 4.5 + PAD_SECONDS), abs=0.02)
    # the next one starts 0.2 s before the end of the utterance before it
    assert activity.trim(4.3, 9.0) == pytest.approx((6.25 - PAD_SECONDS, 8.0 + PAD_SECONDS), abs=0.02)
    # more than a sliver is the segment's own speech
    assert activity.trim(1.5, 7.0) == pytest.approx((2.0 - PAD_SECONDS, 7.0), abs=0.02)
