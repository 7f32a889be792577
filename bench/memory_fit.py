"""What fits where: per chip, a tensor-parallel replica's weights, one KV block, and how many users of a context fit.

Computed from each model's dims with tt-models' placement, the rules ``tests/models/test_tp_memory.py`` checks
byte for byte on instantiated models (split weights 1/N per chip, norms and rotary matrices whole on every chip,
KV heads ``kv_heads // min(N, kv_heads)`` per chip with their K/V projection columns, query groups padded to whole
heads per chip, the vocabulary padded to whole tiles per chip, a hidden size that does not split into whole tiles per
chip zero-padded until it does, TILE weights in whole tiles of their dtype). The KV
pool gets what a chip's DRAM leaves after its weights, less the tenth the engine keeps for activations, trace and
programs (``ModelRunner``'s default pool). Mixture-of-experts layers count their experts as ``tt_models/tt/moe.py``
holds them (:class:`Experts`). DRAM-sharded decode weights pad their columns to whole tiles per DRAM bank (about 2%
more on Wormhole), not counted here.

    .venv/bin/python bench/memory_fit.py [--block-size 64]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from tt_models.tt.hidden_padding import HiddenPadding
from tt_models.tt.tensor_parallel import HeadSplit

TILE = 32
GB = 10**9
# Bytes per element as stored: block floats hold 16 values per shared exponent (a 32x32 tile: 1088 / 576 bytes).
BYTES = {"bf16": 2.0, "bfp8": 1088 / 1024, "bfp4": 576 / 1024}
PROFILES = {  # attention, MLP, LM head, KV cache (tt_models.tt.model_config.Precision)
    "accuracy": ("bf16", "bfp8", "bf16", "bf16"),
    "performance": ("bfp8", "bfp4", "bfp8", "bfp8"),
}
UNIFORM = {"accuracy": ("bf16",) * 4, "performance": ("bfp8",) * 4}  # Whisper, vision towers
BOARDS = {"n150": (1, 12 * GB), "n300": (2, 12 * GB), "p150": (1, 32 * GB), "T3K": (8, 12 * GB),
          "Galaxy (1x32)": (32, 12 * GB)}


@dataclass(frozen=True)
class Attention:
    dim: int
    heads: int
    kv_heads: int
    head_dim: int

    def weights(self, chips: int, dtype: str, cross: bool = False) -> float:
        """QKV (or cross Q and K/V) and output projection bytes on one chip."""
        split = HeadSplit.of(self.heads, self.kv_heads, chips)
        q, kv = split.q_per_chip * self.head_dim, split.kv_per_chip * self.head_dim
        return self.dim * (2 * q + 2 * kv) * BYTES[dtype]

    def kv_heads_per_chip(self, chips: int) -> int:
        return HeadSplit.of(self.heads, self.kv_heads, chips).kv_per_chip


def _tiles(n: int) -> int:
    return -(-n // TILE) * TILE


@dataclass(frozen=True)
class Experts:
    """A layer's routed experts as ``tt_models/tt/moe.py`` holds them: ``n`` experts of ``width``, stacked (gate and
    up ``[dim, n x width]``, down ``[n x width, dim]``, the profile's MLP dtype) and split 1/N a chip with the
    bfloat4_b routing expansion ``[n, n x width]``; the bfloat16 router ``[dim, n]`` (padded to whole tiles) and its
    bias whole on every chip. ``biases`` (GPT-OSS): the gate and up biases 1/N a chip, the routed down biases
    ``[n, dim]`` column-parallel. Biases are bfloat16 TILE rows (32 rows a tile)."""

    n: int
    width: int
    biases: bool = False

    def weights(self, dim: int, chips: int, dtype: str) -> float:
        routed, padded = self.n * self.width / chips, _tiles(self.n)
        stacked = 3 * dim * routed * BYTES[dtype] + padded * routed * BYTES["bfp4"]
        router = padded * dim * 2 + TILE * padded * 2
        biases = 2 * TILE * routed * 2 + padded * dim / chips * 2 if self.biases else 0.0
        return stacked + router + biases


def _vocab(vocab: int, chips: int) -> int:
    """One chip's LM head columns: the vocabulary padded to whole tiles on every chip."""
    return -(-vocab // (chips * TILE)) * TILE if chips > 1 else vocab


@dataclass(frozen=True)
class Decoder:
    """A Llama-family decoder (and Mllama's text model: ``cross_layers`` of its layers attend vision tokens; a
    mixture-of-experts model's: ``experts`` in every layer instead of the MLP)."""

    attention: Attention
    layers: int
    hidden: int
    vocab: int
    cross_layers: int = 0  # layers with a cross-attention (every layer of Whisper's decoder, 8 of Mllama's text)
    mlp_matrices: int = 3  # gate, up, down (Whisper: fc1, fc2)
    experts: Experts | None = None

    def weights(self, chips: int, profile: tuple[str, ...]) -> float:
        attention, mlp, head, _ = profile
        padding = HiddenPadding.of(self.attention.dim, chips)  # a hidden size that does not split, zero-padded
        layer_attention = self.attention if padding is None else replace(self.attention, dim=padding.padded)
        dim = layer_attention.dim
        if self.experts is None:
            mlp_bytes = self.mlp_matrices * dim * self.hidden / chips * BYTES[mlp]
        else:
            mlp_bytes = self.experts.weights(dim, chips, mlp)
        per_layer = layer_attention.weights(chips, attention) + mlp_bytes + 4 * dim
        embedding = self.vocab * dim / chips * 2  # bfloat16, ROW_MAJOR, split on the hidden dim
        cross = self.cross_layers * layer_attention.weights(chips, attention)
        return self.layers * per_layer + cross + embedding + dim * _vocab(self.vocab, chips) * BYTES[head] + 2 * dim

    def kv_block(self, chips: int, profile: tuple[str, ...], block: int) -> float:
        """K and V of one block in every layer (cross layers hold their cross blocks in the same pool)."""
        return 2 * self.layers * self.attention.kv_heads_per_chip(chips) * block * self.attention.head_dim * BYTES[
            profile[3]]


@dataclass(frozen=True)
class Encoder:
    """A bidirectional encoder's layers (Whisper's audio encoder, a vision tower): attention and a 2-matrix MLP."""

    attention: Attention
    layers: int
    hidden: int
    extra: float  # bytes of what the layers do not hold, split over the chips (embeddings, convolutions, projector)

    def weights(self, chips: int, dtype: str) -> float:
        dim = self.attention.dim
        per_layer = self.attention.weights(chips, dtype) + 2 * dim * self.hidden / chips * BYTES[dtype] + 4 * dim * 2
        return self.layers * per_layer + self.extra / chips


def llama(dim: int, heads: int, kv_heads: int, layers: int, hidden: int, vocab: int) -> Decoder:
    return Decoder(Attention(dim, heads, kv_heads, dim // heads), layers, hidden, vocab)


MODELS = {
    "Llama 3.1 8B": (llama(4096, 32, 8, 32, 14336, 128256), None),
    "Llama 3.1 70B": (llama(8192, 64, 8, 80, 28672, 128256), None),
    "Qwen2.5-7B": (llama(3584, 28, 4, 28, 18944, 152064), None),
    # Text: 32 self-attention and 8 cross-attention layers (each with its MLP and a KV pool), vision: 32 local + 8
    # global layers of 1280, projector 7680 -> 4096.
    "Llama 3.2 11B Vision": (Decoder(Attention(4096, 32, 8, 128), 32, 14336, 128264, cross_layers=8),
                             Encoder(Attention(1280, 16, 16, 80), 40, 5120,
                                     extra=(7680 * 4096 + 14 * 14 * 3 * 1280 + 9 * 4 * 1601 * 1280) * 2)),
    # Encoder and decoder of 32 layers of 1280; the decoder's LM head is its token embedding (tied), stored twice.
    "Whisper large-v3": (Decoder(Attention(1280, 20, 20, 64), 32, 5120, 51866, cross_layers=32, mlp_matrices=2),
                         Encoder(Attention(1280, 20, 20, 64), 32, 5120,
                                 extra=(128 * 3 * 1280 + 4 * 1280 * 1280 + 1500 * 1280 + 448 * 1280) * 2)),
    # The hub configs openai/gpt-oss-20b and -120b (hidden 2880, 64 heads over 8 KV heads of 64, experts of 2880,
    # vocabulary 201088; 24 layers of 32 experts, 36 of 128) and Qwen/Qwen3-30B-A3B (hidden 2048, 32 heads over 4 KV
    # heads of 128, 48 layers of 128 experts of 768, vocabulary 151936): every layer sparse.
    "GPT-OSS-20B": (Decoder(Attention(2880, 64, 8, 64), 24, 2880, 201088, experts=Experts(32, 2880, biases=True)),
                    None),
    "GPT-OSS-120B": (Decoder(Attention(2880, 64, 8, 64), 36, 2880, 201088, experts=Experts(128, 2880, biases=True)),
                     None),
    "Qwen3-30B-A3B": (Decoder(Attention(2048, 32, 4, 128), 48, 768, 151936, experts=Experts(128, 768)), None),
}
# Per request: cross-attention positions held in the same pool (Mllama: one image of 4 tiles x 1601 vision tokens;
# Whisper: 1500 encoder positions), and the decoder's context limit.
CROSS_TOKENS = {"Llama 3.2 11B Vision": 4 * 1601, "Whisper large-v3": 1500}
MAX_CONTEXT = {"Qwen2.5-7B": 32768, "Whisper large-v3": 448}
FITS = [("Llama 3.1 8B", "n150"), ("Llama 3.1 8B", "p150"), ("Qwen2.5-7B", "n300"), ("Qwen2.5-7B", "T3K"),
        ("Llama 3.2 11B Vision", "n300"), ("Llama 3.1 70B", "T3K"), ("Llama 3.1 70B", "Galaxy (1x32)"),
        ("Whisper large-v3", "n150"), ("GPT-OSS-20B", "n150"), ("GPT-OSS-20B", "p150"), ("GPT-OSS-120B", "T3K"),
        ("Qwen3-30B-A3B", "T3K")]
CONTEXTS = (448, 4096, 32768, 131072)


def replica(name: str, chips: int, profile: str, block: int) -> tuple[float, float]:
    """One chip's weight bytes and one KV block's bytes of ``name`` split over ``chips``."""
    decoder, encoder = MODELS[name]
    if name.startswith("Whisper"):
        decoder_profile = UNIFORM[profile]
    elif name.startswith("Llama 3.2"):  # Mllama's text MLP stays bfloat8_b in both profiles
        decoder_profile = PROFILES[profile][:1] + ("bfp8",) + PROFILES[profile][2:]
    else:
        decoder_profile = PROFILES[profile]
    weights = decoder.weights(chips, decoder_profile)
    if encoder is not None:
        weights += encoder.weights(chips, UNIFORM[profile][0])
    layers = decoder.layers + (decoder.cross_layers if name.startswith("Llama 3.2") else 0)  # a pool per layer
    kv = 2 * layers * decoder.attention.kv_heads_per_chip(chips) * block * decoder.attention.head_dim * BYTES[
        decoder_profile[3]]
    return weights, kv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-size", type=int, default=64)
    block = parser.parse_args().block_size
    print(f"Per chip, block size {block}: weights, one KV block, the KV blocks the DRAM leaves (90% of it less "
          "the weights), and users at full context that fit (each with its cross blocks)")
    print("| model | board (chips) | profile | weights GB | KV block kB | KV blocks | "
          + " | ".join(f"users at {c}" for c in CONTEXTS) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(CONTEXTS))
    for name, board in FITS:
        chips, dram = BOARDS[board]
        for profile in PROFILES:
            weights, kv = replica(name, chips, profile, block)
            blocks = int(max(0.0, dram * 0.9 - weights) // kv)
            cross = -(-CROSS_TOKENS.get(name, 0) // block)
            users = " | ".join(str(blocks // (-(-c // block) + cross)) if c <= MAX_CONTEXT.get(name, 131072) else "-"
                               for c in CONTEXTS)
            fits = "" if weights < dram * 0.9 else " (does not fit)"
            print(f"| {name}{fits} | {board} ({chips}) | {profile} | {weights / GB:.2f} | {kv / 1e3:.0f} | "
                  f"{blocks} | {users} |")


if __name__ == "__main__":
    main()
