"""Registering the generator classes of ``generator_vllm`` in vLLM's ModelRegistry.

TT vLLM (vllm-tt-plugin) prefixes ``TT`` to each ``hf_config.architectures`` entry and loads the class
registered under that name; vLLM's ``ModelConfig`` resolves the plain HF name first, so an architecture
vLLM does not know also needs the plain name (research/contract.md section 5).

vLLM runs general plugins in every process it starts, including the registry's inspection subprocess,
so this stays cheap: ``generator_vllm``'s ``__all__`` is read from its source (importing it pulls in
torch, transformers and ttnn: seconds) and the classes are registered lazily as
``"generator_vllm:<Class>"`` strings, imported only where vLLM resolves them.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import sys
from collections.abc import Container
from pathlib import Path

# Under vLLM's logger namespace, so the lines show up in vLLM's output at its level (VLLM_LOGGING_LEVEL).
logger = logging.getLogger("vllm.tt_models")

GENERATOR_MODULE = "generator_vllm"
_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def generator_module_path() -> Path | None:
    """The file of ``generator_vllm``, making it importable first if needed.

    It is a top-level module beside ``tt_models``, which the wheel installs; an editable install made before
    it was packaged maps ``tt_models`` alone, so a vLLM process started outside the checkout cannot import it.
    The checkout root is then appended to ``sys.path`` (appended, as TT vLLM does with EXTRA_MODELS_DIR
    bundles, so nothing installed is shadowed); every vLLM process runs this through the plugin entry point
    before resolving a class.
    """
    spec = importlib.util.find_spec(GENERATOR_MODULE)
    if spec is None and (_CHECKOUT_ROOT / f"{GENERATOR_MODULE}.py").is_file():
        sys.path.append(str(_CHECKOUT_ROOT))
        spec = importlib.util.find_spec(GENERATOR_MODULE)
    return Path(spec.origin) if spec is not None and spec.origin else None


def generator_class_names(path: Path) -> list[str]:
    """``__all__`` of the generator module at ``path``: one class per HF architecture, named after it."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{path} has no literal __all__ naming its generator classes")


def registrations(class_names: list[str], known_archs: Container[str]) -> dict[str, str]:
    """``{vLLM architecture name: "generator_vllm:<Class>"}``: ``TT<Class>`` for every class, plus the
    plain ``<Class>`` where vLLM does not know the architecture (``known_archs``)."""
    names = {}
    for name in class_names:
        target = f"{GENERATOR_MODULE}:{name}"
        names[f"TT{name}"] = target
        if name not in known_archs:
            names[name] = target
    return names


def register_tt_models() -> None:
    """Register every ``generator_vllm`` class in vLLM's ModelRegistry (from the ``vllm.general_plugins`` hook).

    Idempotent. Registration is unconditional, so these classes win over TT vLLM's built-in map for the
    same names (the plugin registers its own only where a name is missing). Without vLLM, a no-op.
    """
    try:
        from vllm import ModelRegistry
    except ModuleNotFoundError as error:
        if error.name != "vllm":
            raise
        logger.warning("tt-models: vLLM is not installed; no TT vLLM models registered "
                       "(scripts/install_vllm.sh installs the TT build of vLLM 0.25.1)")
        return
    # vLLM's Mistral 3 module, which its inspection subprocess imports too, needs two names transformers 5.25 lacks.
    from tt_models.vllm.pixtral_names import provide_pixtral_names_on_import
    provide_pixtral_names_on_import()
    path = generator_module_path()
    if path is None:
        logger.warning("tt-models: %s.py is not importable (reinstall tt-models: its wheel has it); "
                       "no TT vLLM models registered", GENERATOR_MODULE)
        return
    # vLLM's own architectures; ours from an earlier call are not "known" (idempotence).
    known = {arch for arch, model in ModelRegistry.models.items()
             if getattr(model, "module_name", None) != GENERATOR_MODULE}
    names = registrations(generator_class_names(path), known)
    for arch, target in names.items():
        ModelRegistry.register_model(arch, target)
    logger.info("tt-models: registered %s from %s", ", ".join(sorted(names)), path)
