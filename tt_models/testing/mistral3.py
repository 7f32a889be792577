"""Mistral 3, tiny: a random HF Mistral 3 (Pixtral vision tower, patch-merging projector, Mistral text decoder with a
sliding window), its image processor (PIL backend, images at most 84 px) and HF's own inputs for it; and an instruct
HF directory of it, built offline.

Images of 14 px patches merged 2 x 2: each 28 x 28 px square of the processed image is one ``[IMG]`` token, a row of
them ends with ``[IMG_BREAK]`` and the image with ``[IMG_END]`` (in place of its last break), as HF's
``PixtralProcessor`` and vLLM's Mistral 3 processor lay them out. The image tokens sit above the test prompts' random
text ids (3 .. 489), at 500 .. 502.

The directory's files: ``config.json`` and safetensors (``tiny_mistral3``), ``preprocessor_config.json`` (Pixtral's
values, 84 px images) and ``processor_config.json`` (``patch_size`` 14, ``spatial_merge_size`` 2), a chat template
in Mistral's ``[INST] ... [/INST]`` layout that writes ``[IMG]`` per image, ``generation_config.json``, and a
tokenizer: byte-level BPE trained here on ``CORPUS``, ``<unk>`` 0 (pad), ``<s>`` 1, ``</s>`` 2, ``[INST]`` 3,
``[/INST]`` 4 and the image tokens at their ids; no ``<s>`` prepended (the template writes it). HF's
``AutoProcessor`` and tt-models' engine read it as they read a real one.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from transformers import (GenerationConfig, Mistral3Config, Mistral3ForConditionalGeneration, PixtralImageProcessor,
                          PixtralProcessor, PreTrainedTokenizerFast)
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

from tt_models.testing.bpe import check_ids, trained_bpe
from tt_models.testing.hf_directory import write_image_text_directory

VOCAB = 512
IMAGE_TOKEN, IMAGE_BREAK, IMAGE_END = 500, 501, 502
PATCH, MERGE = 14, 2
LONGEST_EDGE = 84  # at most 3 x 3 tokens (6 x 6 patches) an image
SLIDING_WINDOW = 32
# Weights drawn with std hidden ** -0.5 (variance-preserving: each branch O(1) beside the residual, as in a trained
# checkpoint); head_dim 32 in both towers (TT-NN's attention takes whole tiles), the vision MLP SiLU-gated as
# Mistral-Small-3.1's.
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, patch_size=PATCH,
              image_size=LONGEST_EDGE, hidden_act="silu", initializer_range=64 ** -0.5,
              rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=32, vocab_size=VOCAB, max_position_embeddings=1024, rms_norm_eps=1e-5,
            initializer_range=64 ** -0.5, sliding_window=SLIDING_WINDOW, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def tiny_mistral3(seed: int = 0, *, text: dict | None = None, **vision: int) -> Mistral3ForConditionalGeneration:
    """Random weights, the RMSNorms' too (HF starts them at 1, which would hide them). ``text``, ``vision``: overrides
    of ``TEXT`` and ``VISION``."""
    torch.manual_seed(seed)
    config = Mistral3Config(vision_config=dict(model_type="pixtral", **(VISION | vision)),
                            text_config=dict(model_type="mistral", **(TEXT | (text or {}))),
                            image_token_index=IMAGE_TOKEN, spatial_merge_size=MERGE, projector_hidden_act="gelu",
                            multimodal_projector_bias=False, tie_word_embeddings=False,
                            architectures=["Mistral3ForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = Mistral3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.2)
    return model


def image_processor(longest_edge: int = LONGEST_EDGE) -> PixtralImageProcessorPil:
    """Pixtral's processor as ``PixtralProcessor`` runs it: sizes aligned to ``patch x merge`` (28 px)."""
    return PixtralImageProcessorPil(size={"longest_edge": longest_edge},
                                    patch_size={"height": PATCH * MERGE, "width": PATCH * MERGE})


def processed(images: list[Image.Image], longest_edge: int = LONGEST_EDGE) -> list[torch.Tensor]:
    """Each image's pixels ``[3, h, w]`` at its own size, as vLLM's Mistral 3 processor hands them per item (HF's pads
    a batch to its largest image; vLLM crops each back to ``image_sizes``)."""
    out = image_processor(longest_edge)(images=images, return_tensors="pt")
    return [p[:, :h, :w] for p, (h, w) in zip(out["pixel_values"], out["image_sizes"].tolist())]


def image_placeholders(pixel_values: torch.Tensor) -> list[int]:
    """One image's tokens: ``[IMG]`` per merged patch, ``[IMG_BREAK]`` after each row, the last one ``[IMG_END]``."""
    rows, cols = (size // (PATCH * MERGE) for size in pixel_values.shape[-2:])
    tokens = ([IMAGE_TOKEN] * cols + [IMAGE_BREAK]) * rows
    return tokens[:-1] + [IMAGE_END]


def prompt(text: list[list[int]], pixel_values: list[torch.Tensor]) -> list[int]:
    """``text[0] image 0 text[1] ...``: each image's placeholder tokens."""
    out = list(text[0])
    for image, after in zip(pixel_values, text[1:]):
        out += image_placeholders(image) + list(after)
    return out


def hf_inputs(tokens: list[int], pixel_values: list[torch.Tensor]) -> dict:
    """HF forward/generate inputs for one prompt: its images padded to one batch with their ``image_sizes``, as HF's
    processor gives them (no images: text only)."""
    inputs = dict(input_ids=torch.tensor([tokens]))
    if pixel_values:
        height, width = (max(p.shape[i] for p in pixel_values) for i in (1, 2))
        inputs.update(pixel_values=torch.stack([torch.nn.functional.pad(p, (0, width - p.shape[2], 0,
                                                                            height - p.shape[1]))
                                                for p in pixel_values]),
                      image_sizes=torch.tensor([list(p.shape[1:]) for p in pixel_values]))
    return inputs


TEXT_SPECIALS = {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4}
IMAGE_SPECIALS = {"[IMG]": IMAGE_TOKEN, "[IMG_BREAK]": IMAGE_BREAK, "[IMG_END]": IMAGE_END}
# Mistral's instruct layout (the real templates add system prompts and tool calls): <s>[INST]user[/INST]answer</s>.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}[INST]"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}[IMG]{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}[/INST]{% elif message['role'] == 'assistant' %}{{ message['content'] }}{{ eos_token }}"
    "{% endif %}{% endfor %}")


def tiny_mistral_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (:func:`~tt_models.testing.bpe.trained_bpe`) below the image tokens, which land on the config's
    ids."""
    backend = trained_bpe(IMAGE_TOKEN, TEXT_SPECIALS, "<SPECIAL_{}>")
    backend.add_special_tokens(list(IMAGE_SPECIALS))
    check_ids(backend, TEXT_SPECIALS | IMAGE_SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<unk>")


def tiny_processor() -> PixtralProcessor:
    """Pixtral's processor files (CLIP mean and std, bicubic resize) at 84 px, 14 px patches merged 2 x 2."""
    return PixtralProcessor(image_processor=PixtralImageProcessor(size={"longest_edge": LONGEST_EDGE},
                                                                  patch_size={"height": PATCH, "width": PATCH}),
                            tokenizer=tiny_mistral_tokenizer(), patch_size=PATCH, spatial_merge_size=MERGE,
                            chat_template=CHAT_TEMPLATE)


def write_tiny_mistral3_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write ``tiny_mistral3(seed)`` with its processor, tokenizer and generation config to ``path``; returns it."""
    return write_image_text_directory(path, tiny_mistral3(seed), tiny_processor(), GenerationConfig(
        bos_token_id=TEXT_SPECIALS["<s>"], pad_token_id=TEXT_SPECIALS["<unk>"], eos_token_id=TEXT_SPECIALS["</s>"]))
