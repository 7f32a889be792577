"""vLLM's multimodal registration of tt-models' image+text classes, as tt-metal registers its own
(``research/vlm_v1.md`` section 1).

vLLM treats a model as multimodal only when its class is ``SupportsMultiModal`` and carries a processor registered
with ``MULTIMODAL_REGISTRY``; the processor (vLLM's own, run on the host in the front end and again for the
scheduler's encoder budget) expands each image's placeholder in the prompt and hands the model its
``pixel_values`` (and Qwen2.5-VL's and Qwen3-VL's ``image_grid_thw``) per request. This module imports vLLM, so only
``generator_vllm`` (the module TT vLLM loads) imports it; the model packages and tt-models' engine never do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm.model_executor.models.gemma3_mm import (
    Gemma3DummyInputsBuilder, Gemma3ForConditionalGeneration, Gemma3MultiModalProcessor, Gemma3ProcessingInfo,
)
from vllm.model_executor.models.interfaces import SupportsMultiModal
from vllm.model_executor.models.qwen2_5_vl import (
    Qwen2_5_VLDummyInputsBuilder, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLMultiModalProcessor,
    Qwen2_5_VLProcessingInfo,
)
from vllm.model_executor.models.qwen3_vl import (
    Qwen3VLDummyInputsBuilder, Qwen3VLForConditionalGeneration, Qwen3VLMultiModalProcessor, Qwen3VLProcessingInfo,
)
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.renderers.params import TokenizeParams

from tt_models.vllm.pixtral_names import provide_pixtral_names_on_import

provide_pixtral_names_on_import()  # before vLLM's Mistral 3 module imports its Pixtral module
from vllm.model_executor.models.mistral3 import (  # noqa: E402
    Mistral3DummyInputsBuilder, Mistral3ForConditionalGeneration, Mistral3MultiModalProcessor, Mistral3ProcessingInfo,
)

__all__ = ["Gemma3MultiModal", "Mistral3MultiModal", "Qwen2_5_VLMultiModal", "Qwen3VLMultiModal", "register_gemma3",
           "register_mistral3", "register_qwen2_5_vl", "register_qwen3_vl"]

# HF's own default (1280 merged tokens of 28 x 28 px). The real checkpoints' preprocessor_config.json allows
# 12845056 px, 16384 tokens an image: vLLM would budget every image at that, more than a 4096-token context.
QWEN2_5_VL_MAX_PIXELS = 28 * 28 * 1280
QWEN3_VL_MAX_PIXELS = 32 * 32 * 1280  # the same 1280 tokens of Qwen3-VL's 32 x 32 px (its checkpoints allow 16384)
MAX_IMAGES = 4  # per prompt, as tt-models' engine takes them; the classes take several (each runs the vision tower)


class TTQwen2_5_VLProcessingInfo(Qwen2_5_VLProcessingInfo):
    """Images only (no video path in the TT class), at most ``MAX_IMAGES`` a prompt, each resized to at most
    ``QWEN2_5_VL_MAX_PIXELS``."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": MAX_IMAGES, "video": 0}

    def get_hf_processor(self, **kwargs: object) -> Any:
        # vLLM caches the processor; its image processor's size is what both the resize and vLLM's token counts
        # (``_get_vision_info``, the encoder budget) read, so capping it there keeps the two in step.
        return capped(super().get_hf_processor(**kwargs), QWEN2_5_VL_MAX_PIXELS)


def capped(processor: Any, max_pixels: int) -> Any:
    """``processor`` with its image processor resizing to at most ``max_pixels``."""
    size = processor.image_processor.size
    if size["longest_edge"] > max_pixels:
        processor.image_processor.size = size | {"longest_edge": max_pixels}
    return processor


register_qwen2_5_vl = MULTIMODAL_REGISTRY.register_processor(
    Qwen2_5_VLMultiModalProcessor, info=TTQwen2_5_VLProcessingInfo, dummy_inputs=Qwen2_5_VLDummyInputsBuilder)


class Qwen2_5_VLMultiModal(SupportsMultiModal):
    """What vLLM asks of a Qwen2.5-VL class beside its processor (the TT class derives from it after its generator
    base, so the generator's members win over the protocol's stubs)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        # A chat message's image where the chat template takes text only: vLLM's Qwen2.5-VL's placeholder.
        return Qwen2_5_VLForConditionalGeneration.get_placeholder_str(modality, i)


class TTQwen3VLProcessingInfo(Qwen3VLProcessingInfo):
    """As :class:`TTQwen2_5_VLProcessingInfo`: images only, at most ``MAX_IMAGES`` a prompt, each resized to at most
    ``QWEN3_VL_MAX_PIXELS``."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": MAX_IMAGES, "video": 0}

    def get_hf_processor(self, **kwargs: object) -> Any:
        return capped(super().get_hf_processor(**kwargs), QWEN3_VL_MAX_PIXELS)


register_qwen3_vl = MULTIMODAL_REGISTRY.register_processor(
    Qwen3VLMultiModalProcessor, info=TTQwen3VLProcessingInfo, dummy_inputs=Qwen3VLDummyInputsBuilder)


class Qwen3VLMultiModal(SupportsMultiModal):
    """What vLLM asks of a Qwen3-VL class beside its processor (as :class:`Qwen2_5_VLMultiModal`)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return Qwen3VLForConditionalGeneration.get_placeholder_str(modality, i)


class TTGemma3ProcessingInfo(Gemma3ProcessingInfo):
    """At most ``MAX_IMAGES`` a prompt (vLLM's own allows any number, budgeted as 999), and one ``<bos>``."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": MAX_IMAGES}

    def get_default_tok_params(self) -> TokenizeParams:
        # vLLM's Gemma 4 fix, which its Gemma 3 lacks: a multimodal model's prompts (chats too) are tokenized with
        # special tokens, and the chat template already writes <bos>, so chats started [<bos>, <bos>, ...].
        params = super().get_default_tok_params()
        if getattr(self.ctx.get_tokenizer(), "chat_template", None) is not None:
            params = params.with_kwargs(add_special_tokens=False)
        return params


class TextOnlyByTokenizer:
    """A vLLM processor's text-only step as the tokenizer alone. vLLM tokenizes a prompt apart from its images (the
    processor cache's path, the encoder budget's dummy inputs) by calling HF's processor on the text alone, which
    transformers 5's Gemma3Processor and PixtralProcessor refuse ("Found 1 <start_of_image> / [IMG] tokens in the text
    but no images were passed"); without images they only tokenize."""

    def _apply_hf_processor_text_only(self, prompt_text: str, tokenization_kwargs: Mapping[str, object]) -> list[int]:
        return self.info.get_tokenizer()(prompt_text, **tokenization_kwargs)["input_ids"]


class TTGemma3MultiModalProcessor(TextOnlyByTokenizer, Gemma3MultiModalProcessor):
    """vLLM's Gemma 3 processor, with its text-only step working under transformers 5."""


register_gemma3 = MULTIMODAL_REGISTRY.register_processor(
    TTGemma3MultiModalProcessor, info=TTGemma3ProcessingInfo, dummy_inputs=Gemma3DummyInputsBuilder)


class Gemma3MultiModal(SupportsMultiModal):
    """What vLLM asks of a Gemma 3 class beside its processor (derived from after the generator base)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        # vLLM's Gemma 3's placeholder: <start_of_image>, which its processor expands.
        return Gemma3ForConditionalGeneration.get_placeholder_str(modality, i)


class TTMistral3ProcessingInfo(Mistral3ProcessingInfo):
    """At most ``MAX_IMAGES`` a prompt (vLLM's own allows any number)."""

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": MAX_IMAGES}


class TTMistral3MultiModalProcessor(TextOnlyByTokenizer, Mistral3MultiModalProcessor):
    """vLLM's Mistral 3 processor (each [IMG] expanded to the image's rows with [IMG_BREAK] / [IMG_END]; pixel_values
    per item cropped to the image's size, so the image_sizes the plugin drops are the pixels' shape), with its
    text-only step working under transformers 5."""


register_mistral3 = MULTIMODAL_REGISTRY.register_processor(
    TTMistral3MultiModalProcessor, info=TTMistral3ProcessingInfo, dummy_inputs=Mistral3DummyInputsBuilder)


class Mistral3MultiModal(SupportsMultiModal):
    """What vLLM asks of a Mistral 3 class beside its processor (derived from after the generator base)."""

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        # vLLM's Mistral 3's: none (the chat template writes [IMG] for each image part).
        return Mistral3ForConditionalGeneration.get_placeholder_str(modality, i)
