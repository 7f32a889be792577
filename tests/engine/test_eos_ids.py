"""A generation config listing several eos ids (Llama 3 instruct: ``<|end_of_text|>``, ``<|eom_id|>``,
``<|eot_id|>``) stops every request at any of them, as vLLM's ``update_from_generation_config`` does."""

import json

from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.sampling import SamplingParams
from tt_models.testing.mllama import write_tiny_mllama_checkpoint


def test_every_generation_config_eos_stops_a_request(tmp_path):
    path = write_tiny_mllama_checkpoint(tmp_path / "mllama")
    eos_ids = json.loads((path / "generation_config.json").read_text())["eos_token_id"]
    assert isinstance(eos_ids, list) and len(eos_ids) == 3
    engine = LLMEngine.from_model(str(path), EngineConfig(max_num_seqs=2, max_model_len=64), backend="host")
    try:
        assert engine.eos_token_id == eos_ids[0]
        request = engine.add_request("a", "Hello", SamplingParams(max_tokens=4, stop_token_ids=[7]))
        assert request.params.stop_token_ids == [7, *eos_ids[1:]]
        ignoring = engine.add_request("b", "Hello", SamplingParams(max_tokens=4, ignore_eos=True))
        assert ignoring.params.stop_token_ids == []
    finally:
        engine.close()
