"""Long-form transcription against HF transformers' own long-form ``generate`` (sequential seek, float32) on the
same weights and audio: the tests' recording (``tt_models.testing.long_recording``: pieces of the real call and
espeak-ng sentences at known places, 1.5 s pauses, a -60 dBFS noise floor; about 4 minutes, or 55 s with --short;
as 16-bit WAV samples, as the tests send it). Prints both WERs, each piece's boundary offsets (the engine's
segments with the default vad=True, Whisper's own timestamps read from the same segments' tokens, and HF's), and the
engine's segments.

    .venv/bin/python bench/whisper_long_form.py [--model whisper-tiny.en] [--optimizations accuracy] [--short]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tt_models import LLM
from tt_models.audio import word_error_rate
from tt_models.speech.timestamps import TIME_PRECISION
from tt_models.speech.transcribe import HOP_LENGTH
from tt_models.testing.hf_whisper import hf_long_form
from tt_models.testing.long_recording import (LAYOUT, LONG_LAYOUT, SAMPLE_RATE, boundary_offsets, long_recording,
                                              stray_segments, through_wav)


def whisper_times(segment, timestamp_begin: int) -> tuple[float, float]:
    """A segment's times as its timestamp tokens say (before vad moved them)."""
    offset = segment.seek * HOP_LENGTH / SAMPLE_RATE
    first, last = segment.tokens[0], segment.tokens[-1]
    start = offset + (first - timestamp_begin) * TIME_PRECISION if first >= timestamp_begin else segment.start
    end = offset + (last - timestamp_begin) * TIME_PRECISION if last >= timestamp_begin else segment.end
    return start, end


def summary(name: str, offsets, stray) -> str:
    found = [abs(x) for o in offsets if o is not None for x in o]
    missing = sum(o is None for o in offsets)
    return (f"{name:>22}: max |offset| {max(found):.2f} s, mean {sum(found) / len(found):.2f} s, "
            f"over 1 s {sum(x > 1 for x in found)}, pieces without a segment {missing}, segments in a pause "
            f"{len(stray)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--optimizations", choices=["accuracy", "performance"], default="accuracy")
    parser.add_argument("--short", action="store_true", help="the 55 s recording")
    args = parser.parse_args()
    recording = long_recording(Path(tempfile.mkdtemp()), LAYOUT if args.short else LONG_LAYOUT)
    samples = through_wav(recording.waveform)[1]  # what an upload of it decodes to, as the tests send it
    with LLM(args.model, backend="host", optimizations=args.optimizations) as llm:
        began = time.perf_counter()
        ours = llm.transcribe((samples, SAMPLE_RATE), timestamps=True)
        engine_seconds = time.perf_counter() - began
        timestamp_begin = llm.llm_engine.processor.generation_config.no_timestamps_token_id + 1
    began = time.perf_counter()
    [hf] = hf_long_form(args.model, [samples])
    hf_seconds = time.perf_counter() - began
    words = len(recording.reference.split())
    print(f"{recording.duration:.1f} s, {len(recording.pieces)} pieces, {words} reference words; engine "
          f"{engine_seconds:.0f} s, HF {hf_seconds:.0f} s")
    print(f"WER engine {word_error_rate(recording.reference, ours.text):.3f}   "
          f"HF long-form {word_error_rate(recording.reference, hf.text):.3f}")
    timings = {"engine (vad)": [(s.start, s.end) for s in ours.segments],
               "engine (Whisper's)": [whisper_times(s, timestamp_begin) for s in ours.segments],
               "HF": [(s, e) for s, e, _ in hf.segments]}
    offsets = {name: boundary_offsets(recording.pieces, times) for name, times in timings.items()}
    for name, times in timings.items():
        print(summary(name, offsets[name], stray_segments(recording.pieces, times)))
    print(f"{'piece (s)':>15}  " + "  ".join(f"{name + ' start/end':>28}" for name in timings))
    for i, piece in enumerate(recording.pieces):
        cells = ["{:>28}".format("-" if o[i] is None else f"{o[i][0]:+.2f} {o[i][1]:+.2f}") for o in offsets.values()]
        print(f"{piece.start:7.2f}-{piece.end:7.2f}  " + "  ".join(cells))
    for segment in ours.segments:
        print(f"{segment.start:7.2f} {segment.end:7.2f} {segment.text}")


if __name__ == "__main__":
    main()
