"""Greedy structured outputs equal vLLM's own engine with xgrammar on the same model: vLLM 0.25.1 serving the tiny
random Llama over SmolLM2's vocabulary through the real vllm-tt-plugin on the host backend (structured_scenario.py,
a fresh process), against ``tt_models.LLM`` on the same checkpoint. The 50 hypothesis-generated JSON schemas of
test_structured_output_schemas.py, plus ``json_object``, a regex, a choice and an EBNF grammar, all in one batch
each side; every output must end at eos (a length cut would hide a late difference)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_structured_output import CHOICES, GRAMMAR, REGEX, write_tiny_llama
from tests.engine.test_structured_output_schemas import draw_cases
from tests.vllm.scenario_process import run_scenario
from tests.vllm.test_plugin_host import inspected
from tt_models import LLM, SamplingParams
from tt_models.engine.structured_output import StructuredOutputsParams

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("structured_scenario.py")
SIZES = dict(max_tokens=200, block_size=32, max_num_seqs=32, max_model_len=256)


@pytest.fixture(scope="module")
def vllm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's Llama class and vLLM's inspected in one process (a vLLM subprocess each otherwise)."""
    return inspected(tmp_path_factory.mktemp("vllm-cache"), ["TTLlamaForCausalLM", "LlamaForCausalLM"])


def requests() -> tuple[list[str], list[dict[str, Any]]]:
    """Prompts and their constraints as vLLM's ``StructuredOutputsParams`` fields."""
    cases = draw_cases()
    prompts = [f"Answer in JSON. {prompt}" for _, prompt in cases] + ["Any JSON:", "A code:", "Well?", "Sum:"]
    constraints = [{"json": schema} for schema, _ in cases] + [
        {"json_object": True}, {"regex": REGEX}, {"choice": CHOICES}, {"grammar": GRAMMAR}]
    return prompts, constraints


def vllm_tokens(model: Path, workdir: Path, cache: Path, prompts: list[str], constraints: list[dict[str, Any]],
                meanwhile: Callable[[], Any]) -> list[dict[str, Any]]:
    """structured_scenario.py's report; ``meanwhile`` (our side) is called here while its process runs."""
    env = {"TT_MODELS_BACKEND": "host", "VLLM_CACHE_ROOT": str(cache), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_PLUGINS": "tt_model_registry,tt,tt_models"}
    arguments = {"model": str(model), "prompts": prompts, "constraints": constraints, **SIZES}
    return run_scenario(SCENARIO, arguments, workdir, env, timeout=600, meanwhile=meanwhile)[0]


def test_greedy_tokens_equal_vllm_with_xgrammar(vllm_cache: Path, tmp_path: Path) -> None:
    model = Path(write_tiny_llama(tmp_path / "tiny-llama"))
    prompts, constraints = requests()
    ours: list[Any] = []

    def generate() -> None:  # ours, while vLLM's process runs
        # The default optimizations, as the plugin passes them (``additional_config.tt.optimizations`` unset).
        llm = LLM(str(model), backend="host", optimizations=None, max_num_seqs=SIZES["max_num_seqs"],
                  block_size=SIZES["block_size"], max_model_len=SIZES["max_model_len"])
        params = [SamplingParams(temperature=0.0, max_tokens=SIZES["max_tokens"],
                                 structured_outputs=StructuredOutputsParams(**c, disable_any_whitespace=True))
                  for c in constraints]
        ours.extend(llm.generate(prompts, params))

    theirs = vllm_tokens(model, tmp_path, vllm_cache, prompts, constraints, meanwhile=generate)
    for i, (mine, vllm) in enumerate(zip(ours, theirs, strict=True)):
        assert vllm["finish_reason"] == "stop", (constraints[i], vllm)
        assert list(mine.outputs[0].token_ids) == vllm["tokens"], (constraints[i], mine.outputs[0].text)
