"""The cost of word timestamps: ``LLM.transcribe(..., timestamps=True, word_timestamps=True)`` against the same
transcription with segment timestamps alone (the same requests and timestamp decoding, so the difference is the
alignment passes and the words' post-processing), same audio, same model, greedy (one temperature), host backend.

Each is run once to warm up, then ``--runs`` times; the best time of each counts. Also timed: the alignment passes
themselves (the engine's teacher-forced decoder pass per window, ``ModelRunner.cross_attention_weights``), and, for
the design's choice, reading the alignment layers' cross keys from the paged cross blocks (what the pass does)
against recomputing them with ``k_proj`` from encoder states (what it would need instead, with the encoder states
kept or the encoder run again).

    .venv/bin/python bench/word_timestamps.py [--model whisper-tiny.en] [--runs 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from tt_models import LLM
from tt_models.audio import speech_sample
from tt_models.runtime import ttnn, use
from tt_models.tt.weights import as_tensor

SAMPLE_RATE = 16000


def _best(runs: int, run: Any) -> float:
    run()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _keys_read_vs_recomputed(llm: LLM, heads: list[list[int]], repeats: int = 5) -> tuple[float, float]:
    """Seconds to read the alignment layers' cross keys of one request from 1500 positions of paged cross blocks
    (a slice per block, concatenated), and to recompute them from encoder states with the layers' K/V projection."""
    generator = llm.llm_engine.runner.model
    model, device = generator.models[0], generator.devices[0]
    cache = llm.llm_engine.runner.kv_cache[0]
    layers = sorted({layer for layer, _ in heads})
    block_size, length = cache[0][0].shape[2], generator.max_cross_attn_tokens
    blocks = list(range(-(-length // block_size)))
    with use(device):
        states = as_tensor(torch.randn(1, 1, length, model.args.dim), device)

        def read() -> None:
            for layer in layers:
                attn = model.decoder.layers[layer].cross_attn
                k_cache = cache[layer][0]
                ttnn.concat([ttnn.slice(k_cache, (b, 0, 0, 0), (b + 1, attn.n_kv_heads, block_size, attn.head_dim))
                             for b in blocks], dim=2)

        def recompute() -> None:
            for layer in layers:
                model.decoder.layers[layer].cross_attn.wkv.forward(states)

        return _best(repeats, read), _best(repeats, recompute)


def word_timestamp_cost(model: str = "whisper-tiny.en", audio: np.ndarray | None = None, runs: int = 3,
                        optimizations: str = "accuracy") -> dict[str, Any]:
    """Seconds of the transcription with segment timestamps and with word timestamps (best of ``runs``, after a
    warm-up), their ratio, the alignment passes' time and share of the transcription alone (the steadier figure on
    a busy machine), and the cross-key read against its recomputation. ``audio``:
    16 kHz, default the speech sample (30 s)."""
    audio = speech_sample(SAMPLE_RATE)[0] if audio is None else audio
    with LLM(model, max_num_seqs=4, backend="host", optimizations=optimizations) as llm:
        runner = llm.llm_engine.runner
        passes: list[float] = []
        timed = runner.cross_attention_weights

        def timed_pass(*args: Any) -> torch.Tensor:
            start = time.perf_counter()
            try:
                return timed(*args)
            finally:
                passes.append(time.perf_counter() - start)

        runner.cross_attention_weights = timed_pass
        # Segments in both runs: the same requests (a multilingual checkpoint's per-window detection too), so the
        # difference is the alignment passes and the words' post-processing.
        options = dict(language="en", temperature=0.0, timestamps=True)
        segments = _best(runs, lambda: llm.transcribe((audio, SAMPLE_RATE), **options))
        words_out: list[Any] = []
        passes.clear()
        words = _best(runs, lambda: words_out.append(llm.transcribe((audio, SAMPLE_RATE), word_timestamps=True,
                                                                    **options)))
        per_run = sum(passes) / (runs + 1)
        heads = llm.llm_engine.processor.generation_config.alignment_heads
        read, recompute = _keys_read_vs_recomputed(llm, heads)
    return {"model": model, "audio_seconds": audio.size / SAMPLE_RATE, "optimizations": optimizations,
            "words": len(words_out[-1].words), "segments_seconds": segments, "words_seconds": words,
            "ratio": words / segments, "alignment_pass_seconds": per_run,
            "alignment_pass_share": per_run / segments, "cross_keys_read_seconds": read,
            "cross_keys_recompute_seconds": recompute}


def report(cost: dict[str, Any]) -> str:
    read, recompute = cost["cross_keys_read_seconds"] * 1e3, cost["cross_keys_recompute_seconds"] * 1e3
    return (f"{cost['model']} ({cost['optimizations']}, host backend), {cost['audio_seconds']:.1f} s of audio, "
            f"{cost['words']} words\n"
            f"  segments only        {cost['segments_seconds']:.2f} s\n"
            f"  with word timestamps {cost['words_seconds']:.2f} s  (x{cost['ratio']:.3f})\n"
            f"  alignment passes     {cost['alignment_pass_seconds']:.3f} s per transcription "
            f"({cost['alignment_pass_share']:.1%} of the transcription alone)\n"
            f"  cross keys of the alignment layers: read from the cross blocks {read:.1f} ms, recomputed with k_proj "
            f"{recompute:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="whisper-tiny.en")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(report(word_timestamp_cost(args.model, runs=args.runs)))


if __name__ == "__main__":
    main()
