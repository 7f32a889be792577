"""``vllm.LLM.chat`` with image messages through the real vllm-tt-plugin, run in a fresh process by
test_plugin_images.py: ``python tests/vllm/chat_scenario.py '<json arguments>'`` from outside the checkout, with
``TT_MODELS_BACKEND=host`` and ``MESH_DEVICE`` set. Images arrive as PNG files and are handed to vLLM as PIL images
(``image_pil`` parts). Several models run one after the other in this one process (each ``LLM`` shut down before the
next starts: a process start and vLLM's imports are paid once). Prints one ``RESULT <json>`` line.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

MARKER = "RESULT "


def with_pil_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``{"type": "image_png", "path": <file>}`` parts as vLLM's ``image_pil`` parts."""
    from PIL import Image

    def part(p: dict[str, Any]) -> dict[str, Any]:
        if p["type"] != "image_png":
            return p
        return {"type": "image_pil", "image_pil": Image.open(p["path"]).convert("RGB")}

    return [{**m, "content": [part(p) for p in m["content"]]} if isinstance(m["content"], list) else m
            for m in messages]


def chat(model: str, conversations: list[list[dict[str, Any]]], max_tokens: int, block_size: int, max_num_seqs: int,
         max_model_len: int) -> dict[str, Any]:
    """Greedy tokens (and the prompt tokens vLLM's processor made) of each conversation from one engine, shut down
    when done."""
    from vllm import LLM, SamplingParams

    start = time.monotonic()
    llm = LLM(model=model, block_size=block_size, max_num_seqs=max_num_seqs, max_model_len=max_model_len)
    started = time.monotonic()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outputs = llm.chat([with_pil_images(c) for c in conversations], params, use_tqdm=False)
    report = {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
              "prompt_token_ids": [list(o.prompt_token_ids) for o in outputs],
              "startup_s": round(started - start, 1), "generate_s": round(time.monotonic() - started, 1)}
    llm.llm_engine.engine_core.shutdown()  # the engine core process ends here, not at some later collection
    del llm, outputs
    gc.collect()
    return report


def main(runs: list[dict[str, Any]], **sizes: int) -> list[dict[str, Any]]:
    """``runs``: ``{"model": <dir>, "conversations": [...]}`` each, served in turn with the same ``sizes``."""
    return [chat(run["model"], run["conversations"], **sizes) for run in runs]


if __name__ == "__main__":
    import sys

    print(MARKER + json.dumps(main(**json.loads(sys.argv[1]))), flush=True)
