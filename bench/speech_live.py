"""The two figures of live transcription and word timestamps (issue 43) in one run: the Realtime API's latency from
the end of each turn's speech to its completed event (p50/p90, ``realtime_latency.py``: a 55 s recording streamed
at real-time pace to ``tt-models serve``), and the cost of word timestamps as a ratio to the same transcription
with segment timestamps alone (``word_timestamps.py``: the 30 s speech sample). Host backend, one model.

    .venv/bin/python bench/speech_live.py [--model whisper-tiny.en] [--optimizations accuracy] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the two benches whose figures these are

import realtime_latency  # noqa: E402
import word_timestamps  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--optimizations", default="accuracy", choices=["accuracy", "performance"])
    parser.add_argument("--runs", type=int, default=3, help="timed transcriptions of each kind (best counts)")
    args = parser.parse_args()
    latencies = realtime_latency.serve_latencies(args.model, args.optimizations)
    cost = word_timestamps.word_timestamp_cost(args.model, runs=args.runs, optimizations=args.optimizations)
    print("Live transcription (Realtime API, one session)")
    print(realtime_latency.report(latencies, args.model, args.optimizations, 1))
    print("Word timestamps")
    print(word_timestamps.report(cost))


if __name__ == "__main__":
    main()
