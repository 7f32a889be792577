"""A tiny Llama 3.2 Vision Instruct HF directory, laid out like the real ``Llama-3.2-11B-Vision-Instruct``.

Its files: ``config.json`` and sharded safetensors with their index (transformers writes the hub's on-disk names,
``language_model.model.*``, ``vision_model.*``, ...), ``preprocessor_config.json`` (the real values, except the
tile size and tile count of the tiny vision config), ``generation_config.json`` (the real one with tiny ids), and a
Llama 3 style tokenizer built offline: byte-level BPE, so any text tokenizes into ids < 320 and decodes back
exactly, the Llama 3 special tokens below 320, ``<|image|>`` = 320 (= vocab_size: the LM head never emits it, as
in the real model), and a chat template that renders as the real one does for messages without tools.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil
from transformers.utils.constants import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

from tests.models.mllama_reference import IMAGE_TOKEN, TEXT, VISION, tiny_mllama

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
