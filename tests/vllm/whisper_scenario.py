"""``vllm.LLM`` transcribing with Whisper through tt-models' encoder-decoder worker, the engine in this process, run in
a fresh process by test_plugin_whisper.py: ``python tests/vllm/whisper_scenario.py '<json arguments>'``. Prints one
``RESULT <json>`` line: the greedy tokens of each clip, the device the worker opened, and what every
``decode_forward`` call received (instrumenting our class, not the plugin).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

MARKER = "RESULT "


def record_decodes(model: Any) -> list[dict[str, Any]]:
    """Per ``decode_forward`` call from here on: its self and cross table widths and the live rows' encoder lengths."""
    calls: list[dict[str, Any]] = []
    forward = model.decode_forward

    def decode_forward(**kwargs: Any) -> Any:
        live = [int(length) for position, length in zip(kwargs["start_pos"], kwargs["encoder_lens"]) if position >= 0]
        calls.append({"page_table": list(kwargs["page_table"].shape), "cross_page_table":
                      list(kwargs["cross_page_table"].shape), "encoder_lens": live,
                      "traced": bool(kwargs.get("enable_trace"))})
        return forward(**kwargs)

    model.decode_forward = decode_forward
    return calls


def main(model: str, wavs: list[str], max_tokens: int, block_size: int, max_num_seqs: int, max_model_len: int,
         worker_cls: str, ignore_eos: bool = False, sweep: tuple[str, ...] = (),
         decoder_prompt: str = "<|startoftranscript|><|notimestamps|>") -> dict[str, Any]:
    """``wavs`` transcribed in one batch, then the clips of ``sweep`` one at a time (TT's offline example's
    ``--test_increasing_seq_lens``, for audio lengths)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from tt_models.audio import load_audio

    start = time.monotonic()
    llm = LLM(model=model, worker_cls=worker_cls, block_size=block_size, max_num_seqs=max_num_seqs,
              max_model_len=max_model_len)
    started = time.monotonic()
    worker = llm.llm_engine.model_executor.driver_worker.worker
    calls = record_decodes(worker.model_runner.model)
    captured = len(worker.model_runner.model.traces.captures)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)

    def transcribe(clips: list[str]) -> list[list[int]]:
        prompts = [{"encoder_prompt": {"prompt": "", "multi_modal_data": {"audio": (load_audio(wav), 16000)}},
                    "decoder_prompt": decoder_prompt} for wav in clips]
        return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]

    tokens = transcribe(wavs)
    swept = [transcribe([wav])[0] for wav in sweep]
    device = worker.mesh_device
    return {"tokens": tokens, "sweep": swept,
            "device": f"{type(device).__module__}.{type(device).__name__}", "mesh": list(device.shape),
            "kv_cache_shape": list(worker.model_runner.kv_caches[0][0][0].shape),
            "kv_layers": len(worker.model_runner.kv_caches[0]), "decodes": calls,
            "captured_while_serving": len(worker.model_runner.model.traces.captures) - captured,
            "startup_s": round(started - start, 1), "generate_s": round(time.monotonic() - started, 1)}


if __name__ == "__main__":
    print(MARKER + json.dumps(main(**json.loads(sys.argv[1]))), flush=True)
