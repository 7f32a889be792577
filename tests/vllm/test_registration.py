"""tt-models' generator classes in TT vLLM's model registry: entry point, EXTRA_MODELS_DIR bundles, no vLLM.

vLLM's import is slow and its registry process-global, so the scenarios run in fresh processes (scenarios.py)
started outside the checkout: the two needing vLLM (the TT build of vLLM 0.25.1) share one, bundles first (it must
see a registry no plugin has touched), then entry_point.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.scenarios import MARKER
from tt_models.vllm import VllmModelInterface
from tt_models.vllm.bundle import METADATA, bundle_module_name
from tt_models.vllm.registry import generator_class_names, generator_module_path, registrations

SCENARIOS = Path(__file__).with_name("scenarios.py")
CLASS_NAMES = generator_class_names(generator_module_path())


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python args`` in ``cwd``, without PYTHONPATH (the checkout must not be importable by accident) and
    with a VLLM_CACHE_ROOT of its own (no model info cached from another version of the classes)."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ |= {"VLLM_CACHE_ROOT": str(cwd / "vllm-cache"), **env}
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def scenarios(names: list[str], workdir: Path, **env: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The reports of ``scenarios.<name>`` for each of ``names``, run in turn in one fresh process, and its
    stderr."""
    done = run([str(SCENARIOS), *names], workdir, **env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert lines, done.stdout[-3000:]
    return json.loads(lines[-1].removeprefix(MARKER)), done.stderr


@pytest.fixture(scope="module")
def with_vllm(bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The bundles and entry_point scenarios, in that order, in one fresh vLLM process (one vLLM import instead of
    two). Needs vLLM: missing, this fails (it never skips)."""
    assert importlib.util.find_spec("vllm") is not None, (
        "vLLM 0.25.1 is not installed: scripts/setup.sh installs it (scripts/install_vllm.sh)")
    return scenarios(["bundles", "entry_point"], tmp_path_factory.mktemp("with-vllm"),
                     EXTRA_MODELS_DIR=str(bundle_dir))[0]


@pytest.fixture(scope="module")
def entry_point(with_vllm: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return with_vllm["entry_point"]


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m tt_models.vllm bundle OUT_DIR`` run from outside the checkout."""
    workdir = tmp_path_factory.mktemp("bundle-command")
    done = run(["-m", "tt_models.vllm", "bundle", "models"], workdir)
    assert f"EXTRA_MODELS_DIR={workdir / 'models'}" in done.stdout
    return workdir / "models"


def test_registrations_name_tt_and_only_unknown_plain_architectures() -> None:
    names = registrations(["LlamaForCausalLM", "BartForConditionalGeneration"], known_archs={"LlamaForCausalLM"})
    assert names == {"TTLlamaForCausalLM": "generator_vllm:LlamaForCausalLM",
                     "TTBartForConditionalGeneration": "generator_vllm:BartForConditionalGeneration",
                     "BartForConditionalGeneration": "generator_vllm:BartForConditionalGeneration"}


def test_interface_keeps_the_constructor_and_refuses_vllm_gpu_use() -> None:
    class Base(VllmModelInterface):
        def __init__(self, models: list[int], max_batch_size: int) -> None:
            self.models, self.max_batch_size = models, max_batch_size

    class Derived(Base):
        pass

    assert "vllm_config" in inspect.signature(Derived.__init__).parameters  # what vLLM's inspection checks
    model = Derived([1], max_batch_size=4)
    assert (model.models, model.max_batch_size) == ([1], 4)
    with pytest.raises(TypeError, match="initialize_vllm_model"):
        Derived([1], 4, vllm_config=object())
    for call in (lambda: model.embed_input_ids(None), lambda: model.forward(None, None),
                 lambda: model.compute_logits(None)):
        with pytest.raises(NotImplementedError, match="prefill_forward"):
            call()


def test_no_vllm_is_a_logged_no_op(tmp_path: Path) -> None:
    reports, stderr = scenarios(["no_vllm"], tmp_path)
    report = reports["no_vllm"]
    assert stderr.count("tt-models: vLLM is not installed; no TT vLLM models registered") == 2, stderr
    assert report["imported"] == []  # importing and calling the hook loads neither torch nor the models


def test_entry_point_registers_every_class_through_vllm_plugin_loading(entry_point: dict[str, Any]) -> None:
    assert not entry_point["plugins_loaded_before"]  # (bundles ran first in its process and loaded none)
    assert entry_point["tt_archs"] == sorted(f"TT{name}" for name in CLASS_NAMES)
    assert entry_point["idempotent"]
    for name, entry in entry_point["classes"].items():
        assert entry["resolves_to_ours"], name
        assert entry["plain_name_registered"] == (not entry["vllm_knows"]), name


def test_vllm_inspection_of_every_class(entry_point: dict[str, Any]) -> None:
    """Inspection ran for every class (a failure aborts the scenario) and, as every class derives from
    VllmModelInterface, classifies it as text generation, which ModelConfig requires of a plain-name registration. The
    subprocess inspection vLLM runs for lazily registered classes agrees with the in-process one."""
    classes = entry_point["classes"]
    assert all(entry["text_generation_with_interface"] for entry in classes.values()), classes
    inspected = entry_point["subprocess_inspection"]
    assert inspected["text_generation"] == classes[inspected["arch"]]["text_generation"]
    assert all(entry["derives_interface"] for entry in classes.values()), classes
    assert all(entry["text_generation"] for entry in classes.values()), classes


def test_bundle_command_writes_one_bundle_per_class(bundle_dir: Path) -> None:
    assert sorted(p.name for p in bundle_dir.iterdir()) == sorted(CLASS_NAMES)
    for name in CLASS_NAMES:
        module = bundle_module_name(name)
        assert json.loads((bundle_dir / name / METADATA).read_text()) == {"arch": name,
                                                                         "main_class": f"{module}:{name}"}
        assert (bundle_dir / name / f"{module}.py").is_file()


def test_bundles_register_and_resolve_as_tt_vllm_does(with_vllm: dict[str, dict[str, Any]]) -> None:
    report = with_vllm["bundles"]
    assert report["registered_before"] == []
    assert report["registered"] == {f"TT{name}": f"{bundle_module_name(name)}:{name}" for name in CLASS_NAMES}
    assert all(report["resolves_to_ours"].values()), report["resolves_to_ours"]
    assert report["inspected"] == {f"TT{name}": name for name in CLASS_NAMES}
