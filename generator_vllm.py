"""The generator classes TT vLLM loads (``TT<HFArch>`` -> ``generator_vllm:<Class>``).

Each class is named after the HF architecture it serves and implements the TT vLLM model contract;
the encoder-decoder classes implement its cross-attention extension, Llama 3.2 Vision the design's
image+text contract, and Qwen2.5-VL, Qwen3-VL, Gemma 3 and Mistral 3 the plugin's V1 image path (see docs/contract.md
and docs/images.md).
Qwen2.5-VL, Qwen3-VL, Gemma 3, Mistral 3, Whisper, BART and MBart are served here as vLLM's multimodal models: their
classes with vLLM's processors (BART's and MBart's: tt_models.vllm.bart) registered (importing vLLM, which tt-models' own
engine, using the model packages' classes, never does).
"""

from tt_models.models.bart.generator import BartForConditionalGeneration as BartGenerator
from tt_models.models.bart.generator import MBartForConditionalGeneration as MBartGenerator
from tt_models.models.gemma3.generator import Gemma3ForCausalLM
from tt_models.models.gemma3.generator import Gemma3ForConditionalGeneration as Gemma3Generator
from tt_models.models.llama.generator import (GptOssForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
                                              Qwen3ForCausalLM, Qwen3MoeForCausalLM)
from tt_models.models.mistral3.generator import Mistral3ForConditionalGeneration as Mistral3Generator
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.models.qwen2_5_vl.generator import Qwen2_5_VLForConditionalGeneration as Qwen2_5_VLGenerator
from tt_models.models.qwen3_vl.generator import Qwen3VLForConditionalGeneration as Qwen3VLGenerator
from tt_models.models.whisper.generator import WhisperForConditionalGeneration as WhisperGenerator
from tt_models.vllm.bart import BartTextToText, register_bart
from tt_models.vllm.multimodal import (Gemma3MultiModal, Mistral3MultiModal, Qwen2_5_VLMultiModal, Qwen3VLMultiModal,
                                       register_gemma3, register_mistral3, register_qwen2_5_vl, register_qwen3_vl)
from tt_models.vllm.whisper import WhisperTranscription, register_whisper


@register_bart
class BartForConditionalGeneration(BartGenerator, BartTextToText):
    """BART with tt-models' text processor for vLLM (tt_models.vllm.bart): served with tt-models' encoder-decoder
    worker, the encoder prompt reaching ``prefill_forward`` as ``input_ids``."""


@register_bart
class MBartForConditionalGeneration(MBartGenerator, BartTextToText):
    """MBart, served as :class:`BartForConditionalGeneration` is."""


@register_gemma3
class Gemma3ForConditionalGeneration(Gemma3Generator, Gemma3MultiModal):
    """Gemma 3 with vLLM's Gemma 3 processor: image prompts reach ``prefill_forward`` as ``pixel_values``."""


@register_mistral3
class Mistral3ForConditionalGeneration(Mistral3Generator, Mistral3MultiModal):
    """Mistral 3 with vLLM's Mistral 3 processor: image prompts reach ``prefill_forward`` as ``pixel_values``, one
    ``[C, h, w]`` tensor per image at its own size."""


@register_qwen2_5_vl
class Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLGenerator, Qwen2_5_VLMultiModal):
    """Qwen2.5-VL with vLLM's Qwen2.5-VL processor: image prompts reach ``prefill_forward`` as ``pixel_values`` and
    ``image_grid_thw``."""


@register_qwen3_vl
class Qwen3VLForConditionalGeneration(Qwen3VLGenerator, Qwen3VLMultiModal):
    """Qwen3-VL with vLLM's Qwen3-VL processor: image prompts reach ``prefill_forward`` as ``pixel_values`` and
    ``image_grid_thw``."""


@register_whisper
class WhisperForConditionalGeneration(WhisperGenerator, WhisperTranscription):
    """Whisper with vLLM's Whisper processor and transcription surface: served by ``vllm serve`` with tt-models'
    encoder-decoder worker (docs/vllm.md), audio reaching ``prefill_forward`` as ``input_features``."""


__all__ = [
    "BartForConditionalGeneration",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "GptOssForCausalLM",
    "LlamaForCausalLM",
    "MBartForConditionalGeneration",
    "Mistral3ForConditionalGeneration",
    "MistralForCausalLM",
    "MllamaForConditionalGeneration",
    "Qwen2ForCausalLM",
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ForCausalLM",
    "Qwen3VLForConditionalGeneration",
    "Qwen3MoeForCausalLM",
    "WhisperForConditionalGeneration",
]
