"""Registration scenarios, run in fresh processes by test_registration.py.

Run as a script from outside the checkout (``python tests/vllm/scenarios.py <scenario> [<scenario> ...]``), so
``generator_vllm`` is importable only if the code under test makes it so. Prints one ``RESULT <json>`` line,
``{scenario: report}``, for the test to check.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace
from typing import Any

MARKER = "RESULT "

# The ModelConfig fields vLLM's registry reads when it resolves or inspects architectures (a real
# ModelConfig would cost a registry subprocess for vLLM's own class of its checkpoint's architecture).
MODEL_CONFIG = SimpleNamespace(model_impl="auto", convert_type="none", runner_type="generate")


def _resolve(tt_arch: str) -> type:
    """How vllm-tt-plugin finds the class: it rewrites ``hf_config.architectures`` to the ``TT`` names,
    then vLLM's get_model_architecture resolves them in the registry (research/contract.md section 5)."""
    from vllm import ModelRegistry

    return ModelRegistry.resolve_model_cls([tt_arch], MODEL_CONFIG)[0]


def _generator_classes() -> dict[str, type]:
    """``generator_vllm``'s classes, imported only after the registration under test ran."""
    import importlib

    from tt_models.vllm.registry import GENERATOR_MODULE, generator_module_path

    assert generator_module_path() is not None
    module = importlib.import_module(GENERATOR_MODULE)
    return {name: getattr(module, name) for name in module.__all__}


def entry_point() -> dict[str, Any]:
    """The ``tt_models`` entry point through vLLM's own plugin loading, then resolution and inspection."""
    import vllm.plugins
    from vllm import ModelRegistry
    from vllm.model_executor.models.registry import _ModelInfo
    from vllm.plugins import load_general_plugins

    from tt_models.vllm import VllmModelInterface, register_tt_models

    plugins_loaded_before = vllm.plugins.plugins_loaded  # False: the loading below is this scenario's
    vllm_knows = set(ModelRegistry.get_supported_archs())
    load_general_plugins()
    archs = set(ModelRegistry.get_supported_archs())
    registered = dict(ModelRegistry.models)
    register_tt_models()
    idempotent = dict(ModelRegistry.models) == registered
    classes = _generator_classes()
    # Ours among them: vllm-tt-plugin's general plugin, when installed, registers its built-in TT names too.
    ours = sorted(a for a in archs if a.startswith("TT")
                  and getattr(ModelRegistry.models[a], "module_name", None) == "generator_vllm")
    report: dict[str, Any] = {"tt_archs": ours, "classes": {}, "idempotent": idempotent,
                              "plugins_loaded_before": plugins_loaded_before}
    for name, cls in classes.items():
        adopted = issubclass(cls, VllmModelInterface)
        # The class as it is once it derives from VllmModelInterface (the change to make if it does not).
        probe = cls if adopted else type(name, (VllmModelInterface, cls), {"__init__": cls.__init__})
        ours = ModelRegistry.models.get(name)
        report["classes"][name] = {
            "resolves_to_ours": _resolve(f"TT{name}") is cls,
            "vllm_knows": name in vllm_knows,
            "plain_name_registered": getattr(ours, "module_name", None) == "generator_vllm",
            "derives_interface": adopted,
            "text_generation": _ModelInfo.from_model_cls(cls).is_text_generation_model,
            "text_generation_with_interface": _ModelInfo.from_model_cls(probe).is_text_generation_model,
        }
    # vLLM's own inspection path for lazily registered classes: a subprocess that loads the general
    # plugins and imports generator_vllm by name (one class: the others live in the same module).
    first = next(iter(classes))
    info, _ = ModelRegistry.inspect_model_cls([f"TT{first}"], MODEL_CONFIG)
    report["subprocess_inspection"] = {"arch": first, "text_generation": info.is_text_generation_model}
    return report


def bundles() -> dict[str, Any]:
    """EXTRA_MODELS_DIR bundles registered exactly as vllm-tt-plugin does, then resolved through vLLM."""
    from vllm import ModelRegistry
    from vllm.model_executor.models.registry import _ModelInfo

    before = set(ModelRegistry.get_supported_archs())
    # vllm-tt-plugin's _register_models_from_extra_dir (platform.py, research/contract.md section 5):
    # every sub-folder with a vllm_metadata.json naming arch and main_class is appended to sys.path and
    # registered as TT<arch> -> main_class where that name is not registered yet.
    base = os.environ["EXTRA_MODELS_DIR"]
    registered = {}
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        meta_path = os.path.join(folder, "vllm_metadata.json")
        if not os.path.isfile(meta_path):
            continue
        with open(meta_path) as fh:
            data = json.load(fh)
        if folder not in sys.path:
            sys.path.append(folder)
        arch = data["arch"]
        tt_arch = arch if arch.startswith("TT") else "TT" + arch
        if tt_arch not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(tt_arch, data["main_class"])
        registered[tt_arch] = data["main_class"]

    resolved = {tt_arch: _resolve(tt_arch) for tt_arch in registered}
    classes = _generator_classes()
    return {
        "registered_before": sorted(a for a in registered if a in before),
        "registered": registered,
        "resolves_to_ours": {a: cls is classes[a.removeprefix("TT")] for a, cls in resolved.items()},
        "inspected": {a: _ModelInfo.from_model_cls(cls).architecture for a, cls in resolved.items()},
    }


def no_vllm() -> dict[str, Any]:
    """``register_tt_models`` where vLLM cannot be imported: a logged no-op that imports nothing heavy."""
    sys.modules["vllm"] = None  # type: ignore[assignment]  # makes `import vllm` fail as if absent
    from tt_models.vllm import register_tt_models

    register_tt_models()
    register_tt_models()
    return {"imported": sorted(m for m in ("torch", "ttnn", "generator_vllm") if m in sys.modules)}


if __name__ == "__main__":
    # Each named scenario in turn in this one process (vLLM's import paid once): ``{name: report}``. The order is
    # the caller's: bundles must come before entry_point, which loads the plugins into the registry bundles checks.
    reports = {}
    for scenario in sys.argv[1:]:
        reports[scenario] = globals()[scenario]()
        # EXTRA_MODELS_DIR is for bundles alone: what follows (and the inspection subprocess entry_point starts)
        # sees no bundles, as in a process of its own.
        os.environ.pop("EXTRA_MODELS_DIR", None)
    print(MARKER + json.dumps(reports), flush=True)
