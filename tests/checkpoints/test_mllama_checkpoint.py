"""Llama 3.2 Vision HF directories load whole: vision weights, tokenizer with the chat template, image processor.

The real checkpoints store the names that transformers' conversion script writes (``language_model.model.*``,
``language_model.lm_head.weight``, ``vision_model.*``, ``multi_modal_projector.*``); transformers 5 renames them
on load. The loaded state dict must equal the tiny model's in memory, whichever names are on disk.
"""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, MllamaConfig
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.mllama.generator import MllamaForConditionalGeneration
from tt_models.testing.images import random_image
from tt_models.testing.mllama import tiny_llama3_tokenizer, tiny_mllama, write_tiny_mllama_checkpoint

# transformers 5 name prefix -> the hub checkpoints' (convert_mllama_weights_to_hf.py's output names).
HUB_NAMES = {"model.language_model.": "language_model.model.", "lm_head.": "language_model.lm_head.",
             "model.vision_model.": "vision_model.", "model.multi_modal_projector.": "multi_modal_projector."}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]  # the real preprocessor_config.json's (HF's default is 0.5)
IMAGE_PROMPT = ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|image|>What is in this image?"
                "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
TEXT_PROMPT = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
               "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello there!"
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
ENGLISH = ["Describe this picture in one short sentence.", "How  many dogs\nare there?  Answer: 3, maybe 4!",
           "Zoë's café serves crème brûlée."]


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> Path:
    return write_tiny_mllama_checkpoint(tmp_path_factory.mktemp("tiny-llama-3.2-vision-instruct"))


@pytest.fixture(scope="module")
def checkpoint(directory):
    return load_hf_checkpoint(directory)


def _hub_name(name: str) -> str:
    prefix = next(p for p in HUB_NAMES if name.startswith(p))
    return HUB_NAMES[prefix] + name[len(prefix):]


def _assert_equal_state(loaded: dict[str, torch.Tensor], original: dict[str, torch.Tensor]) -> None:
    assert loaded.keys() == original.keys()
    for name, tensor in original.items():
        assert loaded[name].dtype == torch.float32 and torch.equal(loaded[name], tensor), name


def test_written_directory_has_the_hub_layout(directory):
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    on_disk = set(index["weight_map"])
    assert len(set(index["weight_map"].values())) > 1  # sharded, as the real checkpoint is
    assert {"language_model.lm_head.weight", "language_model.model.embed_tokens.weight",
            "language_model.model.layers.1.cross_attn_attn_gate", "vision_model.global_transformer.layers.0.gate_ffn",
            "vision_model.patch_embedding.weight", "multi_modal_projector.weight"} <= on_disk
    assert all(name.startswith(tuple(HUB_NAMES.values())) for name in on_disk)
    for name in ("config.json", "preprocessor_config.json", "generation_config.json", "tokenizer.json"):
        assert (directory / name).is_file(), name


def test_directory_loads_with_its_vision_weights(checkpoint, directory):
    config = checkpoint.config
    assert type(config) is MllamaConfig and checkpoint.source == directory
    assert (config.text_config.vocab_size, config.image_token_index) == (320, 320)
    assert "model.vision_model.patch_embedding.weight" in checkpoint.state_dict
    _assert_equal_state(checkpoint.state_dict, tiny_mllama(0).state_dict())


@pytest.mark.parametrize("layout", ["hub", "transformers-5"])
def test_on_disk_names_do_not_matter(tmp_path, layout):
    model = tiny_mllama(1)
    original = model.state_dict()
    model.config.save_pretrained(tmp_path)
    tensors = {name: tensor.clone() for name, tensor in original.items()}
    if layout == "transformers-5":
        save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    else:  # two shards and their index, vision encoder and projector in the first
        tensors = {_hub_name(name): tensor for name, tensor in tensors.items()}
        assert "language_model.model.layers.1.cross_attn.q_proj.weight" in tensors
        shards = {"model-00001-of-00002.safetensors": {n: t for n, t in tensors.items() if "language" not in n},
                  "model-00002-of-00002.safetensors": {n: t for n, t in tensors.items() if "language" in n}}
        for file, shard in shards.items():
            save_file(shard, tmp_path / file, metadata={"format": "pt"})
        weight_map = {name: file for file, shard in shards.items() for name in shard}
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    checkpoint = load_hf_checkpoint(tmp_path)
    _assert_equal_state(checkpoint.state_dict, original)
    assert checkpoint.tokenizer is None and checkpoint.processor is None


def test_tokenizer_ids_and_special_tokens(checkpoint):
    tokenizer, text_config = checkpoint.tokenizer, checkpoint.config.text_config
    assert tokenizer.convert_tokens_to_ids("<|image|>") == 320
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|begin_of_text|>", "<|eot_id|>")
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (
        text_config.bos_token_id, text_config.eos_token_id, text_config.pad_token_id)
    others = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    ids = tokenizer.convert_tokens_to_ids(others)
    assert len(set(ids)) == len(others) and max(ids) < 320
    for text in ENGLISH:
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == tokenizer.bos_token_id and max(ids) < 320, text
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_chat_template_renders_as_llama_3_2_vision_instruct(checkpoint):
    tokenizer = checkpoint.tokenizer
    image_turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this image?"}]}]
    text = tokenizer.apply_chat_template(image_turn, tokenize=False, add_generation_prompt=True)
    assert text == IMAGE_PROMPT
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and ids.count(320) == 1 and tokenizer.decode(ids) == IMAGE_PROMPT
    plain = [{"role": "user", "content": "Hello there!"}]
    assert tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True,
                                         date_string="26 Jul 2024") == TEXT_PROMPT
    with pytest.raises(Exception, match="incompatible with system messages"):
        tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, *image_turn], tokenize=False)


def test_tokenizer_is_deterministic(directory):
    written = json.loads((directory / "tokenizer.json").read_text())
    assert json.loads(tiny_llama3_tokenizer().backend_tokenizer.to_str()) == written


def test_image_processor_is_the_directory_s(checkpoint):
    processor = checkpoint.processor
    assert isinstance(processor, MllamaImageProcessorPil)
    assert (processor.size, processor.max_image_tiles, list(processor.image_mean)) == (
        {"height": 56, "width": 56}, 4, CLIP_MEAN)
    out = processor(images=[[random_image(80, 40, seed=0)]], return_tensors="pt")
    assert out["pixel_values"].shape == (1, 1, 4, 3, 56, 56)
    assert processor(images=[[random_image(112, 56, seed=1)]], return_tensors="pt")["num_tiles"] == [[2]]


def test_generator_builds_from_the_directory(checkpoint, directory, host_device):
    config = AutoConfig.from_pretrained(directory)
    generator = MllamaForConditionalGeneration.initialize_vllm_model(config, host_device, 4, max_seq_len=128)
    assert generator.image_token_id == 320
    assert generator.image_processor.to_dict() == checkpoint.processor.to_dict()
    assert list(generator.image_processor.image_mean) == CLIP_MEAN
