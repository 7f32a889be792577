"""The generator classes TT vLLM loads (``TT<HFArch>`` -> ``generator_vllm:<Class>``).

Each class is named after the HF architecture it serves and implements the TT vLLM model contract;
the encoder-decoder classes implement its cross-attention extension (see the README).
"""

from tt_models.models.bart.generator import BartForConditionalGeneration, MBartForConditionalGeneration
from tt_models.models.llama.generator import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from tt_models.models.whisper.generator import WhisperForConditionalGeneration

__all__ = [
    "BartForConditionalGeneration",
    "LlamaForCausalLM",
    "MBartForConditionalGeneration",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "WhisperForConditionalGeneration",
]
