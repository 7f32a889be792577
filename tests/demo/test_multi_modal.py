"""``demo/offline_inference_tt.py --multi_modal``: TT's Llama 3.2 Vision sample requests, on any image+text model.

No image+text checkpoint ships offline, so without one the demo must say how to point it at one (exit 2, no
traceback). The sample photos are real JPEGs from the ``llama-models`` wheel. Tiny random Mllama, Qwen2.5-VL and
Gemma 3 directories run the whole path: the checkpoint's chat template, the photos, the engine, the printed answers
and metrics.
"""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from transformers import LlamaConfig

from tt_models import LLM, package_data
from tt_models.package_data import sample_image_paths

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "offline_inference_tt.py"


def _load_demo():
    spec = importlib.util.spec_from_file_location("offline_inference_tt", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", [None, "llama"])
def test_without_a_vision_checkpoint_it_says_how_to_point_at_one(model, tmp_path):
    """Nothing to run offline: the message names the checkpoint to get and the option that takes it."""
    args = ["--multi_modal"]
    if model:
        LlamaConfig(num_hidden_layers=1).save_pretrained(tmp_path)  # an HF directory, but not Mllama
        args += ["--model", str(tmp_path)]
    result = subprocess.run([sys.executable, str(DEMO), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert "no such checkpoint ships offline" in result.stderr
    assert "meta-llama/Llama-3.2-11B-Vision-Instruct" in result.stderr and "--model /path/to/dir" in result.stderr
    if model:
        assert f"{str(tmp_path)!r} is not an image+text checkpoint" in result.stderr


def test_sample_images_are_real_photos():
    paths = sample_image_paths()
    assert list(paths) == ["pasta.jpeg", "dog.jpg"]
    for path in paths.values():
        with Image.open(path) as image:
            image.load()  # decodes the whole file
            assert image.format == "JPEG" and min(image.size) > 100, (path, image.size)


def test_missing_llama_models_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(package_data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llama-models==0\.1\.0"):
        sample_image_paths()


def run_demo(model_dir, monkeypatch, capsys) -> tuple[list, str]:
    """``main`` as the command line runs it; ``LLM.generate`` is wrapped only to see the token ids."""
    outputs = []
    generate = LLM.generate

    def recording_generate(self, *args, **kwargs):
        result = generate(self, *args, **kwargs)
        outputs.extend(result)
        return result

    monkeypatch.setattr(LLM, "generate", recording_generate)
    _load_demo().main(["--multi_modal", "--model", str(model_dir), "--max_tokens", "16", "--backend", "host",
                       "--max_model_len", "512"])
    return outputs, capsys.readouterr().out


def write_checkpoint(name: str, path: Path) -> int:
    """The tiny checkpoint ``name`` in ``path``; returns the id of its image tokens in an expanded prompt."""
    from tt_models.testing.gemma3 import write_tiny_gemma3_checkpoint
    from tt_models.testing.mllama import write_tiny_mllama_checkpoint
    from tt_models.testing.qwen2_5_vl import write_tiny_qwen2_5_vl_checkpoint

    write = {"mllama": write_tiny_mllama_checkpoint, "qwen2.5-vl": write_tiny_qwen2_5_vl_checkpoint,
             "gemma3": write_tiny_gemma3_checkpoint}[name]
    write(path)
    config = json.loads((path / "config.json").read_text())
    return config["image_token_index" if name != "qwen2.5-vl" else "image_token_id"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mllama", "qwen2.5-vl", "gemma3"])
def test_tiny_image_text_models_answer_the_sample_requests(name, tmp_path, monkeypatch, capsys):
    image_token = write_checkpoint(name, tmp_path)
    outputs, printed = run_demo(tmp_path, monkeypatch, capsys)

    assert len(outputs) == 3, printed  # two photos, then the text-only question
    *image_outs, text_out = outputs
    assert [image_token in o.prompt_token_ids for o in outputs] == [True, True, False]
    assert all(len(o.outputs[0].token_ids) > 0 for o in outputs), printed
    for out in image_outs:
        assert list(out.outputs[0].token_ids) != list(text_out.outputs[0].token_ids), printed
    assert "dog.jpg 'Write a haiku for this image.' -> " in printed
    assert "pasta.jpeg 'What is for dinner?' -> " in printed
    assert "text 'Write a haiku.' -> " in printed
    assert re.search(r"3 requests, \d+ tokens in [\d.]+ s \| TTFT \d+ ms \| [\d.]+ t/s/u \| [\d.]+ t/s", printed)
