"""The TT vLLM generator classes of BART and MBart (encoder-decoder contract with paged cross-attention)."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.bart.encoder import BartEncoder
from tt_models.tt.model_config import Precision
from tt_models.tt.seq2seq import Seq2SeqArgs, Seq2SeqDecoder
from tt_models.tt.seq2seq_generator import Seq2SeqGenerator


class BartForConditionalGeneration(Seq2SeqGenerator):
    """BART on TT-NN: token ids in, one encoder position per token (up to max_position_embeddings)."""

    max_cross_attn_tokens = 1024
    encoder_input_key = "input_ids"

    @classmethod
    def build_encoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any,
                      precision: Precision) -> BartEncoder:
        return BartEncoder(args, state, device, precision)

    @classmethod
    def build_decoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any,
                      precision: Precision) -> Seq2SeqDecoder:
        lm_head = state.get("lm_head.weight", state["model.shared.weight"])
        bias = state.get("final_logits_bias")
        return Seq2SeqDecoder(args, state, device, precision, lm_head=lm_head,
                              lm_head_bias=None if bias is None else bias.reshape(-1))

    def dummy_encoder_input(self, args: Seq2SeqArgs) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.zeros(32, dtype=torch.int64)}


class MBartForConditionalGeneration(BartForConditionalGeneration):
    """MBart: BART with pre-norm layers and final encoder/decoder LayerNorms."""
