"""Long audio cut into windows of at most 30 s at low-energy points, from the audio alone.

As vLLM's speech-to-text server splits audio (``vllm.multimodal.audio.split_audio``): each cut is in the quietest
stretch (lowest energy over ``frame`` samples, 100 ms) near the end of the window, so a cut rarely falls inside a
word. vLLM searches the window's last second and cuts at its quietest frame; here the search covers the last
``search_seconds`` (5 s), frames are tried every 10 ms, and the cut is in the longest run of frames as quiet as
the quietest (within a factor of 2, plus a floor for digital silence), not at its first 100 ms (which clips the
word before it): ``lead_seconds`` (0.3 s) before speech resumes, or the pause's middle if the pause is shorter.
Near the end of the pause because Whisper puts the first timestamp of a window that opens in silence at
``<|0.00|>`` (tiny.en does), so the next window's first segment starts where its speech does. Every window is
known before any is decoded: all windows of a request run as one batch of engine requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SILENCE_FLOOR = 1e-8  # mean square energy (-80 dBFS) that counts as silence whatever the quietest frame is


@dataclass(frozen=True)
class Window:
    """Samples ``start`` to ``end`` of the audio."""

    start: int
    end: int

    def seconds(self, sample_rate: int) -> tuple[float, float]:
        return self.start / sample_rate, self.end / sample_rate


def split_windows(waveform: np.ndarray, sample_rate: int, *, max_seconds: float = 30.0, search_seconds: float = 5.0,
                  frame: int = 1600, hop: int = 160, lead_seconds: float = 0.3) -> list[Window]:
    """Windows covering ``waveform`` end to end, each at most ``max_seconds`` long; one window for short audio."""
    total = waveform.shape[-1]
    longest = int(max_seconds * sample_rate)
    search = min(int(search_seconds * sample_rate), longest // 2)
    windows: list[Window] = []
    start = 0
    while total - start > longest:
        cut = _quietest_point(waveform, start + longest - search, start + longest, frame, hop,
                              int(lead_seconds * sample_rate))
        windows.append(Window(start, cut))
        start = cut
    windows.append(Window(start, total))
    return windows


def _quietest_point(waveform: np.ndarray, lo: int, hi: int, frame: int, hop: int, lead: int) -> int:
    """The middle of the longest pause in ``waveform[lo:hi]``: frames of ``frame`` samples every ``hop`` samples,
    the longest run of consecutive frames whose energy is at most twice the lowest (plus a floor, so digital
    silence and near-silence count alike; the earliest of equally long runs), cut ``lead`` samples before the
    end of the stretch it covers (where speech resumes), or at its middle if that is later."""
    region = waveform[lo:hi].astype(np.float64)
    if region.size <= frame:
        return hi
    energy = np.concatenate(([0.0], np.cumsum(region * region)))
    starts = np.arange(0, region.size - frame + 1, hop)
    frames = energy[starts + frame] - energy[starts]
    quiet = frames <= 2 * frames.min() + SILENCE_FLOOR * frame
    edges = np.diff(np.concatenate(([0], quiet.astype(np.int8), [0])))
    run_starts, run_ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # [start, end) frame indices
    longest = int(np.argmax(run_ends - run_starts))
    first, end = starts[run_starts[longest]], starts[run_ends[longest] - 1] + frame  # the quiet stretch
    return lo + max(int(first + end) // 2, int(end) - lead)
