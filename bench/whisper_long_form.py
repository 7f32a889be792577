"""Long-form transcription against HF transformers' own long-form ``generate`` (sequential seek, float32) on the
same weights and audio: the recording of tests/speech (pieces of the real call and espeak-ng sentences at known
places, 1.5 s pauses). Prints both WERs, each piece's boundary offsets for both, and the engine's segments.

    .venv/bin/python bench/whisper_long_form.py [--model whisper-tiny.en] [--optimizations accuracy]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the recording is the tests' (tests/speech)

from tests.speech.longform import SAMPLE_RATE, hf_long_form, long_recording  # noqa: E402
from tt_models import LLM  # noqa: E402
from tt_models.audio import word_error_rate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--optimizations", choices=["accuracy", "performance"], default="accuracy")
    args = parser.parse_args()
    recording = long_recording(Path(tempfile.mkdtemp()))
    with LLM(args.model, backend="host", optimizations=args.optimizations) as llm:
        ours = llm.transcribe((recording.waveform, SAMPLE_RATE), timestamps=True)
    [hf] = hf_long_form(args.model, [recording.waveform])
    print(f"{recording.duration:.1f} s, {len(recording.pieces)} pieces")
    print(f"WER engine {word_error_rate(recording.reference, ours.text):.3f}   "
          f"HF long-form {word_error_rate(recording.reference, hf.text):.3f}")
    engine_times = [(s.start, s.end) for s in ours.segments]
    hf_times = [(s, e) for s, e, _ in hf.segments]
    print(f"{'piece':>14}  {'engine start/end off (s)':>26}  {'HF start/end off (s)':>22}")
    for piece in recording.pieces:
        offs = [(min(abs(s - piece.start) for s, _ in times), min(abs(e - piece.end) for _, e in times))
                for times in (engine_times, hf_times)]
        print(f"{piece.start:6.2f}-{piece.end:6.2f}  {offs[0][0]:12.2f} {offs[0][1]:12.2f}  "
              f"{offs[1][0]:10.2f} {offs[1][1]:10.2f}")


if __name__ == "__main__":
    main()
