"""The real TT vLLM plugin serving tt-models' Qwen3-VL with image prompts on the host backend: ``vllm.LLM.chat`` with
PIL images (one image, two of different sizes, text only) goes through vLLM's Qwen3-VL processor (registered on the
TT class) and the plugin's ``pixel_values`` / ``image_grid_thw`` gathering and M-RoPE deltas; the prompt tokens equal
HF's ``Qwen3VLProcessor``'s and the greedy tokens the class driven directly with them (the chats, sizes and references
of :mod:`tests.models.test_qwen3_vl_llm`). One fresh process runs the engine (``tests/vllm/chat_scenario.py``, the
engine core its child): heavy, it takes the machine for about half a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models import test_qwen3_vl_llm as engine_cases
from tests.models.test_qwen3_vl_llm import CHATS, MAX_TOKENS, SIZES, user
from tests.vllm.chat_scenario import MARKER
from tt_models.runtime import mock

pytestmark = pytest.mark.heavy
SCENARIO = Path(__file__).parents[1] / "vllm" / "chat_scenario.py"
# The engine test's fixtures (its checkpoint, images, HF's processor's requests and the class's greedy tokens).
model_dir, images, requests, reference = (engine_cases.model_dir, engine_cases.images, engine_cases.requests,
                                          engine_cases.reference)


def test_vllm_chat_with_images_equals_the_class_driven_directly(model_dir, images, requests, reference, tmp_path):
    conversations = []
    for i, ((text, _), ims) in enumerate(zip(CHATS, images)):
        paths = [tmp_path / f"{i}-{j}.png" for j in range(len(ims))]
        for image, path in zip(ims, paths):
            image.save(path, format="PNG")
        conversations.append(user(text, [{"type": "image_png", "path": str(path)} for path in paths]))
    arguments = {"runs": [{"model": str(model_dir), "conversations": conversations}], "max_tokens": MAX_TOKENS,
                 "block_size": SIZES["block_size"], "max_num_seqs": SIZES["max_num_seqs"],
                 "max_model_len": SIZES["max_model_len"]}
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", mock.MOCK_ENV_VAR)}
    environ |= {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150", "VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(SCENARIO), json.dumps(arguments)], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"vLLM failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    (report,) = json.loads([line for line in done.stdout.splitlines()
                            if line.startswith(MARKER)][-1].removeprefix(MARKER))
    print(f"vLLM startup {report['startup_s']} s, chat {report['generate_s']} s")
    assert report["prompt_token_ids"] == [tokens for tokens, _ in requests]
    assert report["tokens"] == reference
    assert "Traceback" not in done.stderr, done.stderr[-6000:]
