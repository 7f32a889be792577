"""EXTRA_MODELS_DIR bundles: one folder per generator class, registered by TT vLLM with no entry point.

TT vLLM reads ``EXTRA_MODELS_DIR/<folder>/vllm_metadata.json`` (``{"arch": <HF architecture>,
"main_class": "<module>:<Class>"}``), appends the folder to ``sys.path`` and registers ``TT<arch>`` ->
``main_class`` where that name is not registered yet (research/contract.md section 5). Each folder here
carries a module re-exporting its class from ``tt_models``, so a bundle needs tt-models installed in the
serving environment but not this checkout's ``generator_vllm.py`` on the path. The plugin registers only
the ``TT`` name: an architecture vLLM does not know needs the entry point, which adds the plain name.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from tt_models.vllm.registry import GENERATOR_MODULE, generator_module_path

METADATA = "vllm_metadata.json"

_MODULE_SOURCE = '''"""EXTRA_MODELS_DIR bundle of tt-models' {name} (written by `python -m tt_models.vllm bundle`)."""

from {module} import {name}

__all__ = ["{name}"]
'''


def bundle_module_name(arch: str) -> str:
    """Distinct per bundle: TT vLLM puts every bundle folder on the same ``sys.path``."""
    return f"tt_models_{arch.lower()}"


def write_bundles(out_dir: Path) -> list[Path]:
    """Write (or overwrite) ``out_dir/<Class>/`` for every class ``generator_vllm`` exports."""
    if generator_module_path() is None:
        raise RuntimeError(f"{GENERATOR_MODULE}.py is not importable: reinstall tt-models (its wheel has it)")
    generators = importlib.import_module(GENERATOR_MODULE)
    folders = []
    for name in generators.__all__:
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        module = bundle_module_name(name)
        source = _MODULE_SOURCE.format(name=name, module=getattr(generators, name).__module__)
        (folder / f"{module}.py").write_text(source)
        metadata = {"arch": name, "main_class": f"{module}:{name}"}
        (folder / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
        folders.append(folder)
    return folders
