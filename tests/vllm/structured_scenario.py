"""vLLM's own engine with structured outputs (its xgrammar backend) through the real vllm-tt-plugin, run in a fresh
process by test_plugin_structured_outputs.py: ``python tests/vllm/structured_scenario.py '<json arguments>'`` from
outside the checkout, with ``TT_MODELS_BACKEND=host``. Prints one ``RESULT <json>`` line: each request's greedy
tokens and finish reason.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MARKER = "RESULT "


def main(model: str, prompts: list[str], constraints: list[dict[str, Any]], max_tokens: int, block_size: int,
         max_num_seqs: int, max_model_len: int) -> list[dict[str, Any]]:
    """``prompts[i]`` constrained by ``constraints[i]`` (vLLM's ``StructuredOutputsParams`` fields), all in one
    ``generate``. JSON without whitespace is an engine setting in vLLM 0.25.1 (its xgrammar backend reads
    ``structured_outputs_config.disable_any_whitespace``, not the request's field)."""
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm = LLM(model=model, block_size=block_size, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
              structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True})
    params = [SamplingParams(temperature=0.0, max_tokens=max_tokens, structured_outputs=StructuredOutputsParams(**c))
              for c in constraints]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [{"tokens": list(o.outputs[0].token_ids), "finish_reason": o.outputs[0].finish_reason} for o in outputs]


if __name__ == "__main__":
    print(MARKER + json.dumps(main(**json.loads(sys.argv[1]))), flush=True)
