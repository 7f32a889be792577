"""Llama 3.2 Vision (Mllama), tiny: random HF Mllama models and their image processor; and an Instruct HF directory
of the tiny one, laid out like the real ``Llama-3.2-11B-Vision-Instruct``.

The directory's files: ``config.json`` and sharded safetensors with their index (transformers writes the hub's
on-disk names, ``language_model.model.*``, ``vision_model.*``, ...), ``preprocessor_config.json`` (the real values,
except the tile size and tile count of the tiny vision config), ``generation_config.json`` (the real one with tiny
ids), and a Llama 3 style tokenizer built offline: byte-level BPE, so any text tokenizes into ids < 320 and decodes
back exactly, the Llama 3 special tokens below 320, ``<|image|>`` = 320 (= vocab_size: the LM head never emits it,
as in the real model), and a chat template that renders as the real one does for messages without tools.
``CORPUS``, the text the tiny tokenizers (this one, Qwen2.5-VL's and Gemma 3's) are trained on, is here too.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, MllamaConfig, MllamaForConditionalGeneration, PreTrainedTokenizerFast
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil
from transformers.utils.constants import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

IMAGE_TOKEN = 320  # = vocab_size, as in the real checkpoints: the LM head can never emit it
VISION = dict(hidden_size=64, attention_heads=2, intermediate_size=128, num_hidden_layers=3, num_global_layers=2,
              intermediate_layers_indices=[0, 2], vision_output_dim=64 * 3, image_size=56, patch_size=14,
              max_num_tiles=4, norm_eps=1e-5)
TEXT = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256, num_hidden_layers=4,
            cross_attention_layers=[1, 3], vocab_size=320, max_position_embeddings=512, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)
# name -> (vision, text) sizes. "tp": wide enough to split over a T3K's 8 chips (hidden 256 and ffn 512 in both
# towers: whole tiles on each chip; 8 heads), with 2 KV heads, fewer than the chips. Its weights are drawn with
# std hidden ** -0.5 (variance-preserving, so each layer's branch is O(1) beside the residual as in a trained
# checkpoint, not HF's 0.02 under which the random image and the text layers barely reach the logits), and only
# its tanh gates are drawn from uniform(0.3, 1.2), see ``SCALAR_GATES_ONLY``.
# "heads80": vision heads of 80 as the real checkpoints' (1280 / 16), which the attention zero-pads to whole tiles.
TP_WIDTH = 256
CONFIGS = {
    "tiny": (VISION, TEXT),
    "heads80": (dict(VISION, hidden_size=160, vision_output_dim=160 * 3, initializer_range=160 ** -0.5), TEXT),
    "tp": (dict(VISION, hidden_size=TP_WIDTH, attention_heads=8, intermediate_size=512,
                vision_output_dim=TP_WIDTH * 3, initializer_range=TP_WIDTH ** -0.5),
           dict(TEXT, hidden_size=TP_WIDTH, num_attention_heads=8, num_key_value_heads=2, intermediate_size=512,
                initializer_range=TP_WIDTH ** -0.5)),
}
# Configs whose "gate" init takes only the one-element tanh gates. Matching "gate" in the name also takes each text
# layer's mlp.gate_proj weight and gated_positional_embedding's tables. A gate_proj drawn from uniform(0.3, 1.2) is
# all positive: its 512 rows take nearly the same sum of the normalized hidden state (pre-activations rms 13, not 1),
# so SiLU's output swings between tokens with the sign of one sum, the residual stream's norm from 0.5 to 76, and the
# MLP in bf16 is off by up to 12% (0.5% with the "tp" init above). At hidden 256 that left teacher-forced logits at
# PCC 0.973 with HF on one chip. "tiny" keeps that init: numbers measured across the tests depend on it.
SCALAR_GATES_ONLY = {"tp"}


def _is_gate(param_name: str) -> bool:
    """A tanh gate: ``cross_attn_attn_gate``, ``cross_attn_mlp_gate``, ``gate_attn``, ``gate_ffn`` and the positional
    embeddings' ``gate``, each one element."""
    leaf = param_name.rsplit(".", 1)[-1]
    return leaf.endswith("gate") or leaf in ("gate_attn", "gate_ffn")


def tiny_mllama(seed: int = 0, name: str = "tiny") -> MllamaForConditionalGeneration:
    """Random weights with every gate non-zero (HF initializes the text gates to zero, which hides them)."""
    torch.manual_seed(seed)
    vision, text = CONFIGS[name]
    config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                          architectures=["MllamaForConditionalGeneration"])
    config._attn_implementation = "eager"
    model = MllamaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if _is_gate(param_name) if name in SCALAR_GATES_ONLY else "gate" in param_name:
                param.uniform_(0.3, 1.2)
            elif param_name.endswith("bias"):
                param.normal_(0, 0.3)
            elif "embedding" in param_name and "patch" not in param_name:
                param.normal_(0, 0.5)
    return model


def image_processor(model: MllamaForConditionalGeneration) -> MllamaImageProcessorPil:
    vision = model.config.vision_config
    return MllamaImageProcessorPil(size={"height": vision.image_size, "width": vision.image_size},
                                   max_image_tiles=vision.max_num_tiles)


# pad, bos and eos match the tiny text config (0, 1, 2); eos is <|eot_id|>, the end of an Instruct turn.
SPECIAL_TOKENS = {"<|finetune_right_pad_id|>": 0, "<|begin_of_text|>": 1, "<|eot_id|>": 2, "<|end_of_text|>": 3,
                  "<|start_header_id|>": 4, "<|end_header_id|>": 5, "<|eom_id|>": 6, "<|image|>": IMAGE_TOKEN}
CORPUS = ("What is in this image? Describe the picture in one sentence. The quick brown fox jumps over the lazy dog. "
          "There is a cat sitting on the table, and the sky above the house is blue. Hello, how are you today? "
          "Please answer the question about the photo: how many people are standing in the street?")

# The real template's behaviour (without tools): the system turn, with the date, only for prompts without images.
CHAT_TEMPLATE = r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{%- set ns = namespace(has_images=false) %}
{%- for message in messages if message['content'] is not string %}
    {%- for part in message['content'] if part['type'] == 'image' %}
        {%- set ns.has_images = true %}
    {%- endfor %}
{%- endfor %}
{%- if ns.has_images and system_message != '' %}
    {{- raise_exception('Prompting with images is incompatible with system messages.') }}
{%- endif %}
{%- if not ns.has_images %}
    {%- if date_string is not defined %}
        {%- set date_string = strftime_now('%d %b %Y') if strftime_now is defined else '26 Jul 2024' %}
    {%- endif %}
    {{- '<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n' }}
    {{- 'Today Date: ' + date_string + '\n\n' + system_message + '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {%- if message['content'] is string %}
        {{- message['content'] }}
    {%- else %}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'image' %}
                {{- '<|image|>' }}
            {%- elif part['type'] == 'text' %}
                {{- part['text'] }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}"""


def tiny_llama3_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on ``CORPUS`` (deterministic): the special tokens, 256 bytes and merges fill ids
    0..319; ``<|image|>`` is added after them. Like Llama 3's, it prepends ``<|begin_of_text|>``."""
    text_specials = [token for token in SPECIAL_TOKENS if token != "<|image|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([CORPUS], trainers.BpeTrainer(
        vocab_size=TEXT["vocab_size"], special_tokens=text_specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.add_special_tokens(["<|image|>"])
    bos = "<|begin_of_text|>"
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, SPECIAL_TOKENS[bos])])
    ids = {token: backend.token_to_id(token) for token in SPECIAL_TOKENS}
    if ids != SPECIAL_TOKENS or backend.get_vocab_size() != TEXT["vocab_size"] + 1:
        raise AssertionError(f"tiny tokenizer: special ids {ids}, {backend.get_vocab_size()} tokens")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token="<|eot_id|>",
                                        pad_token="<|finetune_right_pad_id|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_image_processor() -> MllamaImageProcessorPil:
    """The real ``preprocessor_config.json`` (CLIP mean and std, not HF's 0.5 defaults) at the tiny tile size."""
    return MllamaImageProcessorPil(size={"height": VISION["image_size"], "width": VISION["image_size"]},
                                   max_image_tiles=VISION["max_num_tiles"], image_mean=OPENAI_CLIP_MEAN,
                                   image_std=OPENAI_CLIP_STD)


def write_tiny_mllama_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write ``tiny_mllama(seed)`` with its processor, generation config and tokenizer to ``path``; returns it."""
    path = Path(path)
    tiny_mllama(seed).save_pretrained(path, max_shard_size="1MB")
    tiny_image_processor().save_pretrained(path)
    eos = [SPECIAL_TOKENS[token] for token in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]  # the real order
    GenerationConfig(bos_token_id=SPECIAL_TOKENS["<|begin_of_text|>"], eos_token_id=eos, do_sample=True,
                     pad_token_id=SPECIAL_TOKENS["<|finetune_right_pad_id|>"], temperature=0.6,
                     top_p=0.9).save_pretrained(path)
    tiny_llama3_tokenizer().save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    tokenizer_config = json.loads(config_file.read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"  # as the real file names it
    config_file.write_text(json.dumps(tokenizer_config, indent=2))
    return path
