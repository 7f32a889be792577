"""The real TT vLLM plugin (vllm-tt-plugin, vendored; scripts/setup.sh installs it) serving tt-models' Llama on a
machine with no card: only ``TT_MODELS_BACKEND=host`` and ``MESH_DEVICE`` set, greedy tokens equal to
``tt_models.LLM``'s, a clean exit.

Each scenario is one fresh process (plugin_scenario.py, started outside the checkout): vLLM's platform and
registry are process-global. The plugin's default path with our class: no device sampling, no async decode
(the class declares neither), prefix caching on, decode padded to ``max_num_seqs``. The vendored commit has
no switch for plugin main's decode as one-token prefill, so that path is not run here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.models.hf_reference import tiny_model
from tests.vllm.plugin_scenario import MARKER
from tt_models import LLM, SamplingParams
from tt_models.runtime import mock

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("plugin_scenario.py")
# Shorter and longer than a block, one crossing a block boundary while decoding; 3 rows in a 4-row decode batch.
PROMPTS = [[5, 17, 99, 3], list(range(10, 50)), [200, 7] * 14]
SIZES = dict(max_tokens=8, block_size=32, max_num_seqs=4, max_model_len=256)
HOST_DEVICE = "tt_models.runtime.host.device.MeshDevice"
# MESH_DEVICE -> the host mesh opened, as the plugin's _resolve_mesh_grid maps it.
MESHES = {"N150": [1, 1], "N300": [1, 2], "T3K": [1, 8], "(2, 4)": [2, 4]}


@pytest.fixture(scope="module")
def vllm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by this module's vLLM runs: the second reuses the first's inspection of the class (vLLM runs it in
    a subprocess otherwise, 10-15 s), and none sees an inspection of another version of the classes."""
    return tmp_path_factory.mktemp("vllm-cache")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert importlib.util.find_spec("vllm_tt_plugin") is not None, (
        "vllm-tt-plugin is not installed: scripts/setup.sh installs it from $TT_VLLM_PLUGIN_SOURCE "
        "(default ../shared/vendor/vllm-tt-plugin-b95c050.tar.gz)")
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama-gqa").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> list[list[int]]:
    """``tt_models.LLM``'s greedy tokens: host backend, the default optimizations (the plugin passes
    ``additional_config.tt.optimizations``, None unless set, as ``tt_models.LLM`` does by default)."""
    llm = LLM(str(model_dir), backend="host", optimizations=None, max_num_seqs=SIZES["max_num_seqs"],
              block_size=SIZES["block_size"], max_model_len=SIZES["max_model_len"])
    params = SamplingParams(temperature=0.0, max_tokens=SIZES["max_tokens"], ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)]


def serve(model_dir: Path, workdir: Path, cache: Path, env: dict[str, str],
          **args: Any) -> tuple[dict[str, Any], str, str]:
    """plugin_scenario.py in a fresh process: its report, stdout (vLLM's log) and stderr. Without the mock cluster
    this suite's conftest sets up: the real ttnn would open a mock device and the plugin would run on it."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VLLM_PLUGINS", "MESH_DEVICE", "TT_VISIBLE_DEVICES", mock.MOCK_ENV_VAR)}
    environ |= {"TT_MODELS_BACKEND": "host", "VLLM_CACHE_ROOT": str(cache), **env}
    arguments = json.dumps({"model": str(model_dir), "prompts": PROMPTS, **SIZES, **args})
    done = subprocess.run([sys.executable, str(SCENARIO), arguments], cwd=workdir, env=environ,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"vLLM failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert lines, done.stdout[-3000:]
    return json.loads(lines[-1].removeprefix(MARKER)), done.stdout, done.stderr


def check_run(report: dict[str, Any], stdout: str, stderr: str, reference: list[list[int]], mesh: str,
              opens: int = 1) -> None:
    print(f"vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
    assert report["tokens"] == reference
    assert "Traceback" not in stderr, stderr[-6000:]
    opened = [line for line in stdout.splitlines() if "tt-models: TT_MODELS_BACKEND=host" in line]
    assert len(opened) == opens and f"host device as a {mesh} mesh" in opened[0], opened


@pytest.mark.parametrize(("mesh_device", "mesh"), [("N150", "1x1"), ("N300", "1x2")])
def test_engine_core_process_opens_a_host_device(model_dir: Path, reference: list[list[int]], vllm_cache: Path,
                                                 tmp_path: Path, mesh_device: str, mesh: str) -> None:
    """vLLM's default: the engine core (the plugin's worker) in a process of its own, where tt-models' general
    plugin patches the worker module when it is imported. On N300 the model is replicated on both chips while
    the plugin asks for a KV cache of ``kv_heads / 2`` heads (its tensor-parallel shape)."""
    check_run(*serve(model_dir, tmp_path, vllm_cache, {"MESH_DEVICE": mesh_device}), reference, mesh=mesh)


def test_in_process_engine(model_dir: Path, reference: list[list[int]], vllm_cache: Path, tmp_path: Path) -> None:
    """The engine in this process, ``VLLM_PLUGINS`` listing the plugin's and ours, ``MESH_DEVICE`` unset, the
    worker module imported before the general plugins run: only open/close are replaced, the device is a 1x1 host
    mesh, the engine's cleanup at exit walks the model's ``modules()``, and other ``MESH_DEVICE`` values open the
    meshes the plugin would."""
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_PLUGINS": "tt_model_registry,tt,tt_models"}
    report, stdout, stderr = serve(model_dir, tmp_path, vllm_cache, env, import_worker_first=True,
                                   mesh_devices=list(MESHES))
    check_run(report, stdout, stderr, reference, mesh="1x1", opens=1 + len(MESHES))
    assert report["replaced"] == ["close_mesh_device", "open_mesh_device"]
    assert report["device"] == {"type": HOST_DEVICE, "shape": [1, 1]}
    assert report["mesh_shapes"] == MESHES
