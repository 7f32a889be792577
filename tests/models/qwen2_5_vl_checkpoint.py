"""A tiny Qwen2.5-VL Instruct HF directory, laid out like the real ``Qwen2.5-VL-3B-Instruct``, built offline.

Its files: ``config.json`` and safetensors (transformers writes the hub's names), ``preprocessor_config.json`` and
``processor_config.json`` (the real values except the tiny pixel budget), ``chat_template.jinja``,
``generation_config.json``, and a Qwen style tokenizer: byte-level BPE trained here (any text tokenizes into ids
below 498 and decodes back exactly), no bos prepended, ``<|endoftext|>`` = pad (0), ``<|im_start|>`` (1),
``<|im_end|>`` = eos (2), and the vision tokens at the tiny config's ids: ``<|vision_start|>`` 498,
``<|vision_end|>`` 499, ``<|image_pad|>`` 500, ``<|video_pad|>`` 501. vLLM's Qwen2.5-VL processor, HF's
``AutoProcessor`` and tt-models' engine all read it as they read the real one.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2_5_VLProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

from tests.models.mllama_checkpoint import CORPUS
from tests.models.qwen2_5_vl_reference import (
    IMAGE_TOKEN, MAX_PIXELS, MIN_PIXELS, VISION, VISION_END, VISION_START, tiny_qwen2_5_vl,
)

TEXT_SPECIALS = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
VISION_SPECIALS = {"<|vision_start|>": VISION_START, "<|vision_end|>": VISION_END, "<|image_pad|>": IMAGE_TOKEN,
                   "<|video_pad|>": IMAGE_TOKEN + 1}

# The real Qwen2.5-VL Instruct chat template (chat_template.json of the hub's checkpoints).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}")


def tiny_qwen_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE on ``CORPUS`` (deterministic) below ``<|vision_start|>``; reserved tokens fill the ids the
    merges leave free, so the vision tokens land on the config's ids."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([CORPUS], trainers.BpeTrainer(
        vocab_size=VISION_START, special_tokens=list(TEXT_SPECIALS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.add_special_tokens([f"<|reserved_{i}|>" for i in range(VISION_START - backend.get_vocab_size())])
    backend.add_special_tokens(list(VISION_SPECIALS))
    ids = {token: backend.token_to_id(token) for token in TEXT_SPECIALS | VISION_SPECIALS}
    if ids != TEXT_SPECIALS | VISION_SPECIALS:
        raise AssertionError(f"tiny tokenizer: special ids {ids}")
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   extra_special_tokens={"image_token": "<|image_pad|>",
                                                         "video_token": "<|video_pad|>"})


def tiny_processor() -> Qwen2_5_VLProcessor:
    """The real processor files (CLIP mean and std, 14 px patches merged 2 x 2) at the tiny pixel budget."""
    sizes = dict(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=VISION["patch_size"],
                 temporal_patch_size=VISION["temporal_patch_size"], merge_size=VISION["spatial_merge_size"])
    return Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**sizes), tokenizer=tiny_qwen_tokenizer(),
                               video_processor=Qwen2VLVideoProcessor(**sizes), chat_template=CHAT_TEMPLATE)


def write_tiny_qwen2_5_vl_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write ``tiny_qwen2_5_vl(seed)`` with its processor, tokenizer and generation config to ``path``; returns it."""
    path = Path(path)
    tiny_qwen2_5_vl(seed).save_pretrained(path)
    processor = tiny_processor()
    processor.save_pretrained(path)  # transformers 5: processor_config.json, tokenizer, chat_template.jinja
    processor.image_processor.save_pretrained(path)  # preprocessor_config.json, the file real checkpoints have
    # The real file's shape: eos is <|im_end|> then <|endoftext|>, which is also bos and pad.
    eos, pad = TEXT_SPECIALS["<|im_end|>"], TEXT_SPECIALS["<|endoftext|>"]
    GenerationConfig(bos_token_id=pad, pad_token_id=pad, eos_token_id=[eos, pad]).save_pretrained(path)
    return path
