"""Gemma 3, tiny: a random HF Gemma 3 (SigLIP tower, projector, sliding and global layers) and its text-only model,
its image processor (PIL backend, 64 px) and HF's own inputs for it; and an instruct HF directory of it, laid out like
the real ``gemma-3-4b-it``, built offline.

The directory's files: ``config.json`` and safetensors (``tiny_gemma3``), ``preprocessor_config.json`` (the real
values, 64 px images) and ``processor_config.json`` (``image_seq_length`` = the config's 16 tokens an image),
``chat_template.jinja`` (the real template), ``generation_config.json``, and a Gemma style tokenizer: byte-level
BPE trained here on ``CORPUS``, ``<bos>`` prepended, ``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, the turn markers, the
newline runs ``\\n`` .. ``\\n\\n\\n\\n`` as whole tokens (vLLM's Gemma 3 processor looks them up to merge the newlines
around an expanded image), and the image tokens at the tiny config's ids: ``<start_of_image>`` 498,
``<end_of_image>`` 499, ``<image_soft_token>`` 500. vLLM's Gemma 3 processor, HF's ``AutoProcessor`` and
tt-models' engine all read it as they read the real one.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from tokenizers import AddedToken, processors
from transformers import (Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3Processor,
                          Gemma3TextConfig, GenerationConfig, PreTrainedTokenizerFast)
from transformers.models.gemma3.image_processing_gemma3 import Gemma3ImageProcessor
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

from tt_models.testing.bpe import check_ids, trained_bpe
from tt_models.testing.hf_directory import write_image_text_directory

VOCAB = 512
IMAGE_TOKEN, START_OF_IMAGE, END_OF_IMAGE = 500, 498, 499
SLIDING_WINDOW = 32
# 64 px images of 8 px patches: 8 x 8 patches pooled 2 x 2 into 16 tokens per image.
VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=64,
              patch_size=8, layer_norm_eps=1e-6)
TOKENS_PER_IMAGE = 16
# SigLIP-so400m's heads are 72 wide, not whole tiles: heads of 48 (padded to 64) stand in for them.
UNTILED_HEADS = dict(hidden_size=96, num_attention_heads=2)
# Sliding and global layers interleaved, each with its own rotary (the global one with linear scaling, as
# gemma-3-4b); query_pre_attn_scalar != head_dim so the scaling counts; the final soft-cap near the logits' own
# scale so that it bends them. Weights drawn with std hidden ** -0.5 (variance-preserving, each branch O(1) beside
# the residual as in a trained checkpoint).
TEXT = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_hidden_layers=4,
            intermediate_size=256, vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-6,
            initializer_range=128 ** -0.5, sliding_window=SLIDING_WINDOW, query_pre_attn_scalar=64,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
            final_logit_softcapping=2.0, bos_token_id=2, eos_token_id=1, pad_token_id=0)


def tiny_gemma3(seed: int = 0, *, text: dict | None = None, tokens_per_image: int = TOKENS_PER_IMAGE,
                **vision: int) -> Gemma3ForConditionalGeneration:
    """Random weights everywhere HF starts from constants: Gemma's norms (``1 + w``, w = 0), SigLIP's LayerNorms and
    biases, the projector (zero), so that every one of them shows in the outputs. ``text``, ``vision``: overrides of
    ``TEXT`` and ``VISION``."""
    torch.manual_seed(seed)
    vision = VISION | vision
    config = Gemma3Config(text_config=TEXT | (text or {}), vision_config=vision, mm_tokens_per_image=tokens_per_image,
                          image_token_id=IMAGE_TOKEN, boi_token_id=START_OF_IMAGE, eoi_token_id=END_OF_IMAGE,
                          architectures=["Gemma3ForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.3)
            elif "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
            elif name.endswith("mm_input_projection_weight"):
                param.normal_(0, vision["hidden_size"] ** -0.5)
    return model


def image_processor(size: int = VISION["image_size"]) -> Gemma3ImageProcessorPil:
    return Gemma3ImageProcessorPil(size={"height": size, "width": size})


def processed(images: list[Image.Image]) -> list[torch.Tensor]:
    """Each image's ``[1, 3, 64, 64]`` pixel values, as vLLM's processor hands them per item (no pan-and-scan)."""
    return list(image_processor()(images=images, return_tensors="pt")["pixel_values"].split(1))


def prompt(text: list[list[int]], images: int) -> list[int]:
    """``text[0] <start_of_image> image 0 <end_of_image> text[1] ...``: each image's expanded placeholders."""
    out = list(text[0])
    for after in text[1: images + 1]:
        out += [START_OF_IMAGE] + [IMAGE_TOKEN] * TOKENS_PER_IMAGE + [END_OF_IMAGE] + list(after)
    return out


def hf_inputs(tokens: list[int], pixel_values: list[torch.Tensor]) -> dict:
    """HF forward/generate inputs for one prompt; ``token_type_ids`` turn on the bidirectional image attention."""
    ids = torch.tensor([tokens])
    inputs = dict(input_ids=ids, token_type_ids=(ids == IMAGE_TOKEN).long())
    if pixel_values:
        inputs["pixel_values"] = torch.cat(pixel_values)
    return inputs


TEXT_SPECIALS = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 4, "<end_of_turn>": 5}
NEWLINES = ["\n" * n for n in range(1, 5)]  # ids START_OF_IMAGE - 4 .. START_OF_IMAGE - 1
IMAGE_SPECIALS = {"<start_of_image>": START_OF_IMAGE, "<end_of_image>": END_OF_IMAGE, "<image_soft_token>": IMAGE_TOKEN}

# The real gemma-3-4b-it chat template (chat_template.json of the hub's checkpoint).
CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n")


def tiny_gemma_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (:func:`~tt_models.testing.bpe.trained_bpe`) below the newline tokens, which land on their ids
    as the image tokens do."""
    first_newline = START_OF_IMAGE - len(NEWLINES)
    backend = trained_bpe(first_newline, TEXT_SPECIALS, "<unused{}>")
    # Plain (not special) added tokens: matched whole before the byte-level split, decoded as written.
    backend.add_tokens([AddedToken(n, normalized=False) for n in NEWLINES])
    backend.add_special_tokens(list(IMAGE_SPECIALS))
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                           special_tokens=[("<bos>", TEXT_SPECIALS["<bos>"])])
    expected = TEXT_SPECIALS | IMAGE_SPECIALS | {n: first_newline + i for i, n in enumerate(NEWLINES)}
    check_ids(backend, expected)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                              "image_token": "<image_soft_token>"})


def tiny_processor() -> Gemma3Processor:
    """The real processor files (SigLIP's 0.5 mean and std, bilinear resize, no pan-and-scan) at 64 px."""
    size = VISION["image_size"]
    image_processor = Gemma3ImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * 3,
                                           image_std=[0.5] * 3, resample=2)
    return Gemma3Processor(image_processor=image_processor, tokenizer=tiny_gemma_tokenizer(),
                           chat_template=CHAT_TEMPLATE, image_seq_length=TOKENS_PER_IMAGE)


def write_tiny_gemma3_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write ``tiny_gemma3(seed)`` with its processor, tokenizer and generation config to ``path``; returns it."""
    # The real file's shape: eos is <eos> then <end_of_turn>.
    eos, end_of_turn = TEXT_SPECIALS["<eos>"], TEXT_SPECIALS["<end_of_turn>"]
    return write_image_text_directory(path, tiny_gemma3(seed), tiny_processor(), GenerationConfig(
        bos_token_id=TEXT_SPECIALS["<bos>"], pad_token_id=TEXT_SPECIALS["<pad>"], eos_token_id=[eos, end_of_turn]))


def tiny_gemma3_text(seed: int = 0, *, text: dict | None = None) -> Gemma3ForCausalLM:
    """Text-only Gemma 3 (``gemma3_text``) on ``TEXT``, its norms drawn away from HF's constants as
    :func:`tiny_gemma3`'s. ``text``: overrides of ``TEXT`` (e.g. ``tie_word_embeddings=False``: tied, a random model's
    greedy tokens repeat one token, its own embedding the closest to the logits)."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(**(TEXT | (text or {})), architectures=["Gemma3ForCausalLM"])
    config._attn_implementation = "eager"
    model = Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
    return model
