"""Fixtures of the tests that run the vendored TT vLLM plugin's own examples."""

from pathlib import Path

import pytest

from tests.vllm.test_plugin_examples import extract_examples


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's ``examples/`` directory, extracted once for the module that asks for it."""
    return extract_examples(tmp_path_factory.mktemp("plugin"))
