"""The generator classes TT vLLM loads (``TT<HFArch>`` -> ``generator_vllm:<Class>``).

Each class is named after the HF architecture it serves and implements the TT vLLM model contract
(see the README). Encoder-decoder classes join as their models land.
"""

from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

__all__ = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"]
