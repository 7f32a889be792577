"""Segment times moved in to the speech inside them: an energy voice-activity detector.

Whisper's timestamps tile the audio: a segment after a pause mostly starts where the one before it ended, inside the
pause, and tiny.en and base put them on whole seconds (HF's ``generate`` gives the very same tokens), so a segment's
start can be 1.5 s before its speech and its end as far after. A subtitle shown that early is what users of
faster-whisper's ``vad_filter`` and stable-ts's silence suppression avoid; here, at no cost in decoding, each
segment's start and end move in to the first and last stretch of speech inside it, found from the audio's energy:
20 ms frames every 10 ms, speech where frames are within ``RELATIVE_DB`` (30 dB) of the segment's loud frames (its
98th percentile) and ``FLOOR_DB`` (10 dB) above the audio's noise floor (the 10th percentile of all its frames)
for at least 30 ms, kept ``PAD_SECONDS`` (0.1 s) wide of the speech. Whisper's timestamps can also run late, a
segment ending just after the next utterance has begun (tiny.en does on the tests' recording, by 1.5 s, HF's the
same): a sliver of speech at either edge, at most ``SLIVER_SECONDS`` (0.3 s) long, cut by the edge and set apart
from the segment's other speech by a pause of at least ``PAUSE_SECONDS`` (0.3 s), belongs to the neighbour and is
left out. Times only move in: a segment never grows, never moves past its neighbours, and keeps its times when no
speech is found in it. The tokens, the text and the timestamp tokens themselves are left as the model wrote them.
"""

from __future__ import annotations

import numpy as np

FRAME = 320  # samples (20 ms at 16 kHz)
HOP = 160  # samples (10 ms)
RELATIVE_DB = 30.0  # a frame this far below the segment's loud frames is not speech
LOUD_PERCENTILE = 98  # the segment's loud level (robust to a click)
FLOOR_DB = 10.0  # nor is a frame less than this above the noise floor
FLOOR_PERCENTILE = 10  # the audio's noise floor
MIN_SPEECH_FRAMES = 3  # speech starts where this many frames in a row are loud enough (30 ms)
PAD_SECONDS = 0.1
SLIVER_SECONDS = 0.3  # speech this short, cut by a segment's edge and apart from the rest, is the neighbour's
PAUSE_SECONDS = 0.3  # what sets speech apart


class SpeechActivity:
    """The frame energies of one audio (computed once), and the trimming of a segment's times to its speech."""

    def __init__(self, waveform: np.ndarray, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        samples = np.asarray(waveform, dtype=np.float64)
        energy = np.concatenate(([0.0], np.cumsum(samples * samples)))
        starts = np.arange(0, max(samples.size - FRAME, 0) + 1, HOP)
        ends = np.minimum(starts + FRAME, samples.size)
        mean_square = (energy[ends] - energy[starts]) / np.maximum(ends - starts, 1)
        self.levels = 10.0 * np.log10(mean_square + 1e-12)  # dBFS of the frame starting at i * HOP
        self.floor = float(np.percentile(self.levels, FLOOR_PERCENTILE))

    def trim(self, start: float, end: float) -> tuple[float, float]:
        """``(start, end)`` in seconds moved in to the speech inside, padded by ``PAD_SECONDS``; unchanged when
        the segment has no speech (or is too short to tell)."""
        frames_per_second = self.sample_rate / HOP
        first = max(int(np.ceil(start * frames_per_second)), 0)
        last = min(int(np.floor(end * frames_per_second - FRAME / HOP)), self.levels.size - 1)  # frames inside
        if last - first + 1 < MIN_SPEECH_FRAMES:
            return start, end
        levels = self.levels[first:last + 1]
        loud = levels >= max(np.percentile(levels, LOUD_PERCENTILE) - RELATIVE_DB, self.floor + FLOOR_DB)
        runs = np.convolve(loud.astype(np.int32), np.ones(MIN_SPEECH_FRAMES, dtype=np.int32), mode="valid")
        spoken = np.flatnonzero(runs == MIN_SPEECH_FRAMES)  # frames that begin MIN_SPEECH_FRAMES loud ones
        if spoken.size == 0:
            return start, end
        # stretches of speech: [begin, end] frame indices, apart where the gap is a pause
        gaps = np.flatnonzero(np.diff(spoken) > PAUSE_SECONDS * frames_per_second)
        begins = spoken[np.concatenate(([0], gaps + 1))]
        ends = spoken[np.concatenate((gaps, [spoken.size - 1]))] + MIN_SPEECH_FRAMES - 1
        sliver = SLIVER_SECONDS * frames_per_second
        keep = slice(1 if begins.size > 1 and begins[0] == 0 and ends[0] - begins[0] < sliver else 0,
                     -1 if begins.size > 1 and ends[-1] == levels.size - 1 and ends[-1] - begins[-1] < sliver
                     else None)
        begins, ends = begins[keep], ends[keep]
        if begins.size == 0:
            return start, end
        onset = (first + begins[0]) / frames_per_second
        offset = (first + ends[-1]) * HOP / self.sample_rate + FRAME / self.sample_rate
        return max(start, onset - PAD_SECONDS), min(end, offset + PAD_SECONDS)
