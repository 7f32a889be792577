"""A tiny llama GGUF shaped like SmolLM2-135M-Instruct's (Q4_1 layers, a Q8_0 embedding tied to the output, a
byte-level BPE tokenizer with ChatML special tokens and a chat template), written in milliseconds so that tests of
tt-models' own GGUF handling need not convert the real 90 MB file (a minute of CPU)."""

from pathlib import Path

import gguf
import numpy as np
import torch
from gguf.quants import dequantize, quantize
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

TINY_LLAMA = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=100000.0, max_position_embeddings=256)
# SmolLM2's: <|endoftext|> is unk, <|im_start|> bos, <|im_end|> eos and pad; all CONTROL tokens.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A few merges in the byte alphabet (Ġ is the space), so that encoding really merges, spaces runs included.
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ Ġ", "ĠĠ ĠĠ", "i s", "Ġ a", "e r", "Ġ 1", "1 2", "o u"]
# SmolLM2-135M-Instruct's template, shortened; enough for tokenizers to round-trip it.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# GGUF names of the HF weights of one layer, and the type each is stored in: SmolLM2's Q4_1 file keeps the norms in
# F32; one layer's value projection is F16 so that every storage type transformers dequantizes here is exercised.
LAYER_TENSORS = {
    "input_layernorm": ("attn_norm", gguf.GGMLQuantizationType.F32),
    "self_attn.q_proj": ("attn_q", gguf.GGMLQuantizationType.Q4_1),
    "self_attn.k_proj": ("attn_k", gguf.GGMLQuantizationType.Q4_1),
    "self_attn.v_proj": ("attn_v", gguf.GGMLQuantizationType.Q4_1),
    "self_attn.o_proj": ("attn_output", gguf.GGMLQuantizationType.Q4_1),
    "post_attention_layernorm": ("ffn_norm", gguf.GGMLQuantizationType.F32),
    "mlp.gate_proj": ("ffn_gate", gguf.GGMLQuantizationType.Q4_1),
    "mlp.up_proj": ("ffn_up", gguf.GGMLQuantizationType.Q4_1),
    "mlp.down_proj": ("ffn_down", gguf.GGMLQuantizationType.Q4_1),
}


def tiny_tokens() -> list[str]:
    """The vocabulary: the special tokens, the 256 bytes spelled in GPT-2's byte alphabet, then each merge's result."""
    return SPECIAL_TOKENS + list(bytes_to_unicode().values()) + [merge.replace(" ", "") for merge in MERGES]


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (rotary halves to interleaved pairs), which
    transformers' GGUF loader has to undo."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]) \
        .swapaxes(1, 2).reshape(weights.shape)


def _stored(weights: np.ndarray, qtype: gguf.GGMLQuantizationType) -> tuple[np.ndarray, np.ndarray]:
    """``weights`` as written in ``qtype``, and what they read back as (float32)."""
    if qtype == gguf.GGMLQuantizationType.F32:
        return weights, weights
    if qtype == gguf.GGMLQuantizationType.F16:
        return weights.astype(np.float16), weights.astype(np.float16).astype(np.float32)
    data = quantize(weights, qtype)
    return data, dequantize(data, qtype)


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """Write a random tiny llama to ``path`` as llama.cpp would convert it; return the HF state dict the file
    dequantizes to (Q/K in HF's row order: loading it must undo the permutation exactly)."""
    torch.manual_seed(seed)
    tokens = tiny_tokens()
    config = LlamaConfig(**TINY_LLAMA, vocab_size=len(tokens), tie_word_embeddings=True)
    hf = {name: tensor.numpy() for name, tensor in LlamaForCausalLM(config).state_dict().items()}
    # Random norm weights instead of ones: a swapped or dropped norm tensor would go unnoticed otherwise.
    rng = np.random.default_rng(seed)
    for name in hf:
        if name.endswith("norm.weight"):
            hf[name] = rng.uniform(0.5, 1.5, hf[name].shape).astype(np.float32)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(TINY_LLAMA["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS) +
                           [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIAL_TOKENS)))
    writer.add_token_merges(MERGES)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    expected: dict[str, torch.Tensor] = {}

    def add(gguf_name: str, hf_name: str, qtype: gguf.GGMLQuantizationType, n_head: int | None = None) -> None:
        weights = hf[hf_name]
        # Quantization blocks run along a row's inputs, so permuting rows commutes with it (asserted below): the
        # expected value is the HF tensor as stored and read back, in HF's row order, where a permutation left
        # undone (or undone with the query's head count for the key's 2 heads) shows.
        data, read_back = _stored(_permute(weights, n_head) if n_head else weights, qtype)
        writer.add_tensor(gguf_name, data, raw_dtype=None if qtype.name in ("F32", "F16") else qtype)
        expected[hf_name] = torch.from_numpy(_stored(weights, qtype)[1].copy())
        if n_head:
            assert np.array_equal(read_back, _permute(expected[hf_name].numpy(), n_head))

    # No output.weight: the output is tied to the Q8_0 embedding, as in SmolLM2's file.
    add("token_embd.weight", "model.embed_tokens.weight", gguf.GGMLQuantizationType.Q8_0)
    for layer in range(config.num_hidden_layers):
        for hf_name, (gguf_name, qtype) in LAYER_TENSORS.items():
            if layer == 1 and hf_name == "self_attn.v_proj":
                qtype = gguf.GGMLQuantizationType.F16
            n_head = {"self_attn.q_proj": config.num_attention_heads,
                      "self_attn.k_proj": config.num_key_value_heads}.get(hf_name)
            add(f"blk.{layer}.{gguf_name}.weight", f"model.layers.{layer}.{hf_name}.weight", qtype, n_head)
    add("output_norm.weight", "model.norm.weight", gguf.GGMLQuantizationType.F32)
    expected["lm_head.weight"] = expected["model.embed_tokens.weight"]

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected
