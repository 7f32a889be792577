"""Packaging: ``python -m build`` of this tree gives an sdist and a wheel built from it; the wheel, installed into a
fresh venv, works on its own: ``tt-models --help``, ``import tt_models, generator_vllm`` (the module TT vLLM loads
``generator_vllm:<Class>`` from), every module of ``tt_models.testing`` (what the benches share with the tests: they
run from a wheel install) and a one-prompt ``tt_models.LLM`` run on the host backend, all resolving to the installed
files, not the checkout's.

No network: the build uses this venv's setuptools (``--no-isolation``), the wheel installs with ``--no-deps
--no-index``, and the fresh venv sees this venv's dependencies through a ``.pth`` line (a directory added that way
is not a site dir: its ``.pth`` files, among them the editable install's finder, stay inactive).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import tt_models
from tt_models.vllm.registry import generator_class_names

REPO = Path(__file__).resolve().parents[1]
MOCK_YAMLS = sorted(p.name for p in (REPO / "tt_models" / "runtime" / "mock").glob("*.yaml"))
PROMPT = [5, 6, 7]
TESTING = sorted(f"tt_models.testing.{p.stem}" for p in (REPO / "tt_models" / "testing").glob("*.py")
                 if p.stem != "__init__")

RUN = """
import importlib, importlib.metadata, json, sys
import generator_vllm, tt_models
from tt_models.vllm.registry import generator_module_path

llm = tt_models.LLM(sys.argv[1], backend="host", max_num_seqs=1, max_model_len=64)
[output] = llm.generate({"prompt_token_ids": %s}, tt_models.SamplingParams(temperature=0.0, max_tokens=8,
                                                                           ignore_eos=True), use_tqdm=False)
llm.close()
testing = {name: importlib.import_module(name).__file__ for name in %r}
print(json.dumps({"tt_models": tt_models.__file__, "generator_vllm": generator_vllm.__file__,
                  "plugin_finds": str(generator_module_path()), "classes": generator_vllm.__all__,
                  "version": importlib.metadata.version("tt-models"), "token_ids": list(output.outputs[0].token_ids),
                  "testing": testing}))
""" % (PROMPT, TESTING)


def _run(*args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _generate(model: Path) -> list[int]:
    with tt_models.LLM(str(model), backend="host", max_num_seqs=1, max_model_len=64) as llm:
        [output] = llm.generate({"prompt_token_ids": PROMPT}, tt_models.SamplingParams(
            temperature=0.0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    return list(output.outputs[0].token_ids)


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    source, dist, venv, elsewhere = (tmp_path / name for name in ("source", "dist", "venv", "elsewhere"))
    listed = _run("git", "ls-files", "--cached", "--others", "--exclude-standard", cwd=REPO).splitlines()
    for name in listed:
        if (REPO / name).is_file():  # (a tracked file deleted in the work tree is not)
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, source, cwd=tmp_path)
    [sdist], [wheel] = dist.glob("*.tar.gz"), dist.glob("*.whl")
    with tarfile.open(sdist) as tar:
        root = f"tt_models-{tt_models.__version__}/"
        sdist_names = {name.removeprefix(root) for name in tar.getnames()}
    wheel_names = set(zipfile.ZipFile(wheel).namelist())
    assert MOCK_YAMLS and "tt_models.testing.gemma3" in TESTING
    for names in (sdist_names, wheel_names):
        assert {"generator_vllm.py", "tt_models/__init__.py", "tt_models/server/cli.py"} <= names
        assert {f"tt_models/runtime/mock/{yaml}" for yaml in MOCK_YAMLS} <= names
        assert {f"{name.replace('.', '/')}.py" for name in TESTING} <= names

    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip())
    deps = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "tt_models_test_deps.pth").write_text("".join(f"{path}\n" for path in deps))

    help_text = _run(venv / "bin" / "tt-models", "--help", cwd=tmp_path)
    assert "serve" in help_text and "proxy" in help_text

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=128, max_position_embeddings=128)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny-llama")
    elsewhere.mkdir()
    installed = json.loads(_run(python, "-c", RUN, tmp_path / "tiny-llama", cwd=elsewhere).splitlines()[-1])
    for key in ("tt_models", "generator_vllm", "plugin_finds"):
        assert Path(installed[key]).is_relative_to(site), installed
    assert sorted(installed["testing"]) == TESTING
    for name, path in installed["testing"].items():
        assert Path(path).is_relative_to(site), (name, path)
    assert installed["classes"] == generator_class_names(REPO / "generator_vllm.py")
    assert installed["version"] == tt_models.__version__
    assert installed["token_ids"] == _generate(tmp_path / "tiny-llama")
