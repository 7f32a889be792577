"""Window cutting and segment parsing, without a model: cuts land in the pauses of known audio, and segments are
read from timestamp tokens as HF's long-form ``_retrieve_segment`` reads them."""

from __future__ import annotations

import numpy as np

from tt_models.speech import split_windows
from tt_models.speech.timestamps import parse_segments

RATE = 16000


def test_windows_cover_the_audio_and_cut_in_the_pauses():
    rng = np.random.default_rng(0)
    # 100 s of noise ("speech") with 0.4 s pauses at known places, one inside each window's last 5 s
    audio = rng.uniform(-0.5, 0.5, 100 * RATE).astype(np.float32)
    pauses = [27.0, 54.5, 81.0]
    for at in pauses:
        audio[int(at * RATE):int((at + 0.4) * RATE)] = 0
    windows = split_windows(audio, RATE)
    assert windows[0].start == 0 and windows[-1].end == audio.size
    assert all(a.end == b.start for a, b in zip(windows, windows[1:]))
    assert all(0 < w.end - w.start <= 30 * RATE for w in windows)
    cuts = [w.end / RATE for w in windows[:-1]]
    assert len(cuts) == len(pauses)
    for cut, at in zip(cuts, pauses):
        assert at <= cut <= at + 0.4  # inside the pause, not in "speech"
    assert split_windows(audio[:30 * RATE], RATE) == split_windows(audio[:30 * RATE], RATE)[:1]  # one window


def test_segments_from_timestamp_tokens():
    begin, eos = 100, 50
    decode = lambda ids: "".join(f" w{t}" for t in ids)  # noqa: E731
    # <|0.00|> a b <|1.00|><|1.00|> c <|2.40|><eos>: two segments, finished (a lone timestamp at the end)
    read = parse_segments([100, 1, 2, 150, 150, 3, 220, eos], timestamp_begin=begin, eos_token_id=eos, offset=10.0,
                          duration=30.0, decode=decode)
    assert [(s.start, s.end, s.text) for s in read.segments] == [(10.0, 11.0, " w1 w2"), (11.0, 12.4, " w3")]
    assert read.segments[0].tokens == [100, 1, 2, 150] and read.resume_at is None
    # ending with a pair: the rest of the window, from the last timestamp, is unfinished
    read = parse_segments([100, 1, 150, 150, eos], timestamp_begin=begin, eos_token_id=eos, offset=0.0,
                          duration=30.0, decode=decode)
    assert len(read.segments) == 1 and read.resume_at == 1.0 and read.rest is None
    # text cut short after a pair: unfinished from there, its text kept aside; a partial output: closed ones only
    tokens = [100, 1, 150, 150, 4, 5]
    read = parse_segments(tokens, timestamp_begin=begin, eos_token_id=eos, offset=0.0, duration=30.0, decode=decode)
    assert read.resume_at == 1.0 and (read.rest.start, read.rest.end, read.rest.text) == (1.0, 30.0, " w4 w5")
    partial = parse_segments(tokens, timestamp_begin=begin, eos_token_id=eos, offset=0.0, duration=30.0,
                             decode=decode, final=False)
    assert [s.text for s in partial.segments] == [" w1"]
    # no timestamps at all: one segment spanning the window
    read = parse_segments([7, 8, eos], timestamp_begin=begin, eos_token_id=eos, offset=5.0, duration=3.0,
                          decode=decode)
    assert [(s.start, s.end, s.text) for s in read.segments] == [(5.0, 8.0, " w7 w8")] and read.resume_at is None
    # a segment from 4.00 s to 5.00 s of a 3 s window (the last one, padded to 30 s): its end is the window's end,
    # and its start, after that, is clamped to it
    read = parse_segments([300, 1, 350, eos], timestamp_begin=begin, eos_token_id=eos, offset=10.0, duration=3.0,
                          decode=decode)
    assert [(s.start, s.end, s.text) for s in read.segments] == [(13.0, 13.0, " w1")]
