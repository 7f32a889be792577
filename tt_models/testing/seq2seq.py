"""Tiny random HF encoder-decoder models (Whisper English-only and multilingual, BART, MBart) and their inputs; and a
tiny random BART with Whisper tiny.en's tokenizer, written as an HF directory (for servers that serve one)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import processors
from transformers import (BartConfig, BartForConditionalGeneration, MBartConfig, MBartForConditionalGeneration,
                          PreTrainedTokenizerFast, WhisperConfig, WhisperForConditionalGeneration)

from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.bart.generator import BartForConditionalGeneration as TTBart
from tt_models.models.bart.generator import MBartForConditionalGeneration as TTMBart
from tt_models.models.whisper.generator import WhisperForConditionalGeneration as TTWhisper

SIZES = dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=256, decoder_ffn_dim=256)
WHISPER = dict(num_mel_bins=80, max_source_positions=64, max_target_positions=64, decoder_start_token_id=50257,
               pad_token_id=50256, bos_token_id=50257, eos_token_id=50256)
# English-only Whisper has 51864 tokens, multilingual 51865 (language and task tokens).
CASES = {
    "whisper-en": (lambda: WhisperConfig(**SIZES, **WHISPER, vocab_size=51864), WhisperForConditionalGeneration,
                   TTWhisper),
    "whisper-multilingual": (lambda: WhisperConfig(**SIZES, **WHISPER, vocab_size=51865),
                             WhisperForConditionalGeneration, TTWhisper),
    "bart": (lambda: BartConfig(**SIZES, vocab_size=320, max_position_embeddings=128), BartForConditionalGeneration,
             TTBart),
    "mbart": (lambda: MBartConfig(**SIZES, vocab_size=320, max_position_embeddings=128, scale_embedding=True),
              MBartForConditionalGeneration, TTMBart),
}
# Wide enough to split over a T3K's 8 chips: d_model 256 and ffn 512 (whole tiles on each chip), 8 heads.
TP_SIZES = dict(SIZES, d_model=256, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=512,
                decoder_ffn_dim=512)
TP_CASES = {
    "whisper-multilingual-tp": (lambda: WhisperConfig(**TP_SIZES, **WHISPER, vocab_size=51865),
                                WhisperForConditionalGeneration, TTWhisper),
    "bart-tp": (lambda: BartConfig(**TP_SIZES, vocab_size=320, max_position_embeddings=128),
                BartForConditionalGeneration, TTBart),
    "mbart-tp": (lambda: MBartConfig(**TP_SIZES, vocab_size=320, max_position_embeddings=128, scale_embedding=True),
                 MBartForConditionalGeneration, TTMBart),
}
ALL_CASES = CASES | TP_CASES


def tiny_seq2seq(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    make_config, hf_class, _ = ALL_CASES[name]
    config = make_config()
    config.attn_implementation = "eager"
    model = hf_class(config).eval()
    with torch.no_grad():  # HF initializes biases to zero: make them count
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias"):
                param.normal_(0, 0.3)
    return model


def encoder_input(model: torch.nn.Module, length: int, seed: int) -> tuple[dict, dict, int]:
    """(our encoder input, HF's keyword arguments, encoder length) for a random input of ``length``
    (Whisper: always its full window)."""
    g = torch.Generator().manual_seed(seed)
    config = model.config
    if config.model_type == "whisper":
        features = torch.randn(config.num_mel_bins, 2 * config.max_source_positions, generator=g)
        return {"input_features": features}, {"input_features": features[None]}, config.max_source_positions
    ids = torch.randint(3, config.vocab_size, (length,), generator=g)
    return {"input_ids": ids}, {"input_ids": ids[None]}, length


def save_tiny_bart(directory: Path) -> Path:
    """A random BART with the GPT-2 byte-level BPE of Whisper tiny.en (no special tokens added on encode),
    saved with its tokenizer as an HF directory."""
    source = load_hf_checkpoint("whisper-tiny.en").tokenizer
    source.save_pretrained(directory / "whisper-tokenizer")
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(directory / "whisper-tokenizer" / "tokenizer.json"),
                                        bos_token="<|startoftranscript|>", eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>")
    tokenizer._tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    torch.manual_seed(0)
    config = BartConfig(vocab_size=len(tokenizer), d_model=128, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=256,
                        decoder_ffn_dim=256, max_position_embeddings=1024, init_std=0.1,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id, decoder_start_token_id=tokenizer.eos_token_id,
                        forced_eos_token_id=None)
    path = directory / "bart"
    BartForConditionalGeneration(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
