"""The decoder side of an encoder-decoder model: embeddings, cross-decoder layers, final norm, LM head.

Whisper and BART differ only in how tokens are embedded (scale, position offset, embedding LayerNorm),
norm placement and a final logits bias, all read from their HF configs by :class:`Seq2SeqArgs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from tt_models.runtime import ttnn
from tt_models.tt.cross_attention import cross_inputs
from tt_models.tt.decode_configs import DecodeConfigs, reshard
from tt_models.tt.decode_inputs import HostInputs, advanced_index, advanced_positions, tracked_ints
from tt_models.tt.embedding import Embedding
from tt_models.tt.lm_head import LMHead, last_token_logits
from tt_models.tt.model_config import Precision
from tt_models.tt.norm import LayerNorm
from tt_models.tt.paged_inputs import PrefillChunk
from tt_models.tt.seq2seq_layers import CrossDecoderLayer
from tt_models.tt.tensor_parallel import HeadSplit, check_splits, chips, fracture, gather
from tt_models.tt.weights import as_int_tensor


@dataclass(frozen=True)
class Seq2SeqArgs:
    dim: int
    n_heads: int
    head_dim: int
    encoder_layers: int
    decoder_layers: int
    ffn_dim: int
    vocab_size: int
    eps: float
    pre_norm: bool
    activation: str
    max_source_positions: int  # encoder positions (Whisper: after the stride-2 conv)
    max_target_positions: int
    embed_scale: float
    position_offset: int  # BART's learned positions start at index 2
    max_batch_size: int
    sliding_window: int | None = None
    decode_rows: int = 32

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @classmethod
    def from_hf(cls, hf_config: Any, *, max_batch_size: int) -> "Seq2SeqArgs":
        heads = hf_config.decoder_attention_heads
        if hf_config.encoder_attention_heads != heads or hf_config.encoder_ffn_dim != hf_config.decoder_ffn_dim:
            raise ValueError("encoder and decoder must share head count and FFN width")
        head_dim = hf_config.d_model // heads
        if head_dim % 32:
            raise ValueError(f"head_dim {head_dim} is not a multiple of 32, which TT-NN's attention ops require")
        if max_batch_size > cls.decode_rows:
            raise ValueError(f"max_batch_size {max_batch_size} > {cls.decode_rows}: TT-NN decode holds at most "
                             f"{cls.decode_rows} users per device (use data parallelism)")
        whisper = hf_config.model_type == "whisper"
        return cls(
            dim=hf_config.d_model,
            n_heads=heads,
            head_dim=head_dim,
            encoder_layers=hf_config.encoder_layers,
            decoder_layers=hf_config.decoder_layers,
            ffn_dim=hf_config.decoder_ffn_dim,
            vocab_size=hf_config.vocab_size,
            eps=1e-5,  # HF's nn.LayerNorm default, used by Whisper, BART and MBart
            pre_norm=hf_config.model_type in ("whisper", "mbart"),
            activation=hf_config.activation_function,
            max_source_positions=hf_config.max_source_positions if whisper else hf_config.max_position_embeddings,
            max_target_positions=hf_config.max_target_positions if whisper else hf_config.max_position_embeddings,
            embed_scale=hf_config.d_model ** 0.5 if getattr(hf_config, "scale_embedding", False) else 1.0,
            position_offset=0 if whisper else 2,
            max_batch_size=max_batch_size,
        )


class Seq2SeqDecoder:
    def __init__(self, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any, precision: Precision, *,
                 lm_head: torch.Tensor, lm_head_bias: torch.Tensor | None = None) -> None:
        prefix = "model.decoder."
        self.args, self.device = args, device
        self.heads = HeadSplit.of(args.n_heads, args.n_kv_heads, chips(device))
        check_splits(device, d_model=args.dim, ffn_dim=args.ffn_dim)
        self.decode = decode = DecodeConfigs.sharded(device, dim=args.dim, hidden_dim=args.ffn_dim,
                                                     n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                                                     head_dim=args.head_dim)
        self.embed_tokens = Embedding(state[f"{prefix}embed_tokens.weight"], device)
        self.embed_positions = Embedding(state[f"{prefix}embed_positions.weight"], device)
        self.embedding_norm = (LayerNorm(state[f"{prefix}layernorm_embedding.weight"],
                                         state[f"{prefix}layernorm_embedding.bias"], args.eps, device)
                               if f"{prefix}layernorm_embedding.weight" in state else None)
        self.layers = [CrossDecoderLayer(args, state, f"{prefix}layers.{i}.", device, precision, decode)
                       for i in range(args.decoder_layers)]
        self.final_norm = (LayerNorm(state[f"{prefix}layer_norm.weight"], state[f"{prefix}layer_norm.bias"], args.eps,
                                     device) if f"{prefix}layer_norm.weight" in state else None)
        self.lm_head = LMHead(lm_head, device, precision.lm_head_weights, decode, lm_head_bias)

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> Any:
        return self._embed(self.embed_tokens.forward(tokens),
                           self.embed_positions.forward(positions + self.args.position_offset))

    def _embed(self, x: Any, position_embeddings: Any) -> Any:
        if self.args.embed_scale != 1.0:
            x = ttnn.multiply(x, self.args.embed_scale)
        x = ttnn.add(x, position_embeddings)
        return x if self.embedding_norm is None else fracture(self.embedding_norm.forward(x), self.device)

    def fill_cross(self, encoder_states: Any, encoder_len: int, cross_row: torch.Tensor,
                   kv_cache: list[list[Any]]) -> None:
        """Write one request's cross K/V (every layer) into its cross blocks."""
        block_size = kv_cache[0][0].shape[2]
        table = as_int_tensor(cross_row[None, : -(-encoder_len // block_size)], self.device)
        for layer, cache in zip(self.layers, kv_cache):
            layer.cross_attn.fill(encoder_states, cache, table)

    def prefill(self, tokens: torch.Tensor, start: int, end: int, page_table: torch.Tensor, cross_row: torch.Tensor,
                encoder_len: int, kv_cache: list[list[Any]], on_device: bool = False) -> Any:
        """Decoder positions ``start .. end - 1`` of one request (its cross K/V already in its cross blocks);
        the logits of position ``end - 1`` (left on the device, ``[1, 1, 1, V]``, with ``on_device``)."""
        chunk = PrefillChunk.of(page_table, start, end, kv_cache[0][0].shape[2])
        for x in self.prefill_layers(tokens, chunk, cross_row, encoder_len, kv_cache):
            pass
        return last_token_logits(x, chunk, self.final_norm, self.lm_head, self.device, on_device)

    def prefill_layers(self, tokens: torch.Tensor, chunk: PrefillChunk, cross_row: torch.Tensor, encoder_len: int,
                       kv_cache: list[list[Any]]) -> Iterator[Any]:
        """The hidden states ``[1, 1, chunk.padded, dim]`` of the embedding and of each layer."""
        x = self.embed(chunk.padded_tokens(tokens), torch.arange(chunk.start, chunk.start + chunk.padded))
        yield x
        cross = cross_inputs(cross_row[None].expand(chunk.padded, -1), torch.full((chunk.padded,), encoder_len - 1),
                             self.device)
        fill_table = as_int_tensor(chunk.fill_blocks[None], self.device)
        sdpa_table = as_int_tensor(chunk.read_blocks[None], self.device)
        for layer, cache in zip(self.layers, kv_cache):
            x = layer.forward_prefill(x, cache, cross, page_table=sdpa_table, fill_page_table=fill_table,
                                      chunk_start=chunk.start)
            yield x

    def cross_attention_weights(self, tokens: torch.Tensor, cross_row: torch.Tensor, encoder_len: int,
                                kv_cache: list[list[Any]], heads: list[tuple[int, int]]) -> torch.Tensor:
        """The cross-attention probabilities of ``heads`` (``(layer, head)`` pairs) over a teacher-forced pass of
        ``tokens`` (positions ``0 ..``; its cross K/V in its cross blocks): host float32 ``[len(heads),
        len(tokens), encoder_len]``, in the order of ``heads``.

        One prefill chunk that writes no self K/V (every block it would fill is ``-1``, which the fill ops skip; a
        first chunk attends its own fresh K/V), through the last layer that has one of the heads; the LM head does
        not run. The probabilities come to the host: the median filter and dynamic time warping that turn them into
        token times (``tt_models.speech.word_timestamps``) run there, as in HF and openai-whisper."""
        block_size = kv_cache[0][0].shape[2]
        chunk = PrefillChunk.of(torch.full((-(-len(tokens) // block_size),), -1, dtype=torch.int32), 0, len(tokens),
                                block_size)
        cross_blocks = cross_row[: -(-encoder_len // block_size)].tolist()
        by_layer: dict[int, list[int]] = {}
        for layer, head in heads:
            by_layer.setdefault(layer, []).append(head)
        x = self.embed(chunk.padded_tokens(tokens), torch.arange(chunk.padded))
        cross = cross_inputs(cross_row[None].expand(chunk.padded, -1), torch.full((chunk.padded,), encoder_len - 1),
                             self.device)
        unwritten = as_int_tensor(chunk.fill_blocks[None], self.device)
        weights: dict[int, torch.Tensor] = {}
        for i, (layer, cache) in enumerate(zip(self.layers[: max(by_layer) + 1], kv_cache)):
            kwargs = dict(page_table=unwritten, fill_page_table=unwritten, chunk_start=0)
            if i not in by_layer:
                x = layer.forward_prefill(x, cache, cross, **kwargs)
                continue
            x, probs = layer.forward_prefill_with_cross_weights(x, cache, cross, cross_blocks, encoder_len,
                                                                by_layer[i], **kwargs)
            weights[i] = ttnn.to_torch(probs)[0, :, : len(tokens)].float()
        return torch.stack([weights[layer][by_layer[layer].index(head)] for layer, head in heads])

    def decode_inputs(self, tokens: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor,
                      cross_page_table: torch.Tensor, encoder_lens: torch.Tensor) -> HostInputs:
        """The host inputs of :meth:`decode_device` for one token per user (``positions`` ``-1``: a padding row),
        padded to 32 rows. Padding rows read the first learned position (their results are discarded)."""
        pad = self.args.decode_rows - tokens.shape[0]
        positions = torch.nn.functional.pad(positions, (0, pad), value=-1)
        encoder_lens = torch.nn.functional.pad(encoder_lens, (0, pad))
        position_ids = (positions.clamp(min=0) + self.args.position_offset).reshape(1, -1)
        return {"tokens": Embedding.host_ids(torch.nn.functional.pad(tokens, (0, pad)), self.device),
                "position_ids": advanced_index(position_ids, positions, self.device, ttnn.uint32),
                "current_pos": tracked_ints(positions, self.device, advance=advanced_positions),
                "page_table": tracked_ints(torch.nn.functional.pad(page_table, (0, 0, 0, pad)), self.device),
                "cross_page_table": tracked_ints(torch.nn.functional.pad(cross_page_table, (0, 0, 0, pad)),
                                                self.device),
                "cross_pos": tracked_ints(torch.where(positions >= 0, encoder_lens - 1, -1), self.device)}

    def decode_device(self, inputs: dict[str, Any], kv_cache: list[list[Any]]) -> Any:
        """Device ops only (traceable): device logits ``[1, 1, 32, V]``. The step then advances its positions and
        position ids by one on the device, as the next step's are unless the batch changed (a replayed trace's
        inputs need no copy then: :mod:`tt_models.tt.decode_trace`)."""
        x = self._embed(self.embed_tokens.forward_ids(inputs["tokens"]),
                        self.embed_positions.forward_ids(inputs["position_ids"]))
        x = reshard(x, self.decode.residual)
        cross = (inputs["cross_page_table"], inputs["cross_pos"])
        for layer, cache in zip(self.layers, kv_cache):
            x = layer.forward_decode(x, cache, cross, page_table=inputs["page_table"],
                                     current_pos=inputs["current_pos"])
        x = gather(x, self.device) if self.final_norm is None else self.final_norm.forward(x, self.decode.lm_head_norm)
        logits = self.lm_head.forward(x)
        ttnn.plus_one(inputs["current_pos"], skip_negative_entries=True)
        ttnn.plus_one(inputs["position_ids"])
        return logits
