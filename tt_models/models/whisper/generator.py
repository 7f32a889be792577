"""The TT vLLM generator class of Whisper (encoder-decoder contract with paged cross-attention)."""

from __future__ import annotations

from typing import Any

import torch

from tt_models.models.whisper.encoder import WhisperEncoder
from tt_models.tt.model_config import Precision
from tt_models.tt.seq2seq import Seq2SeqArgs, Seq2SeqDecoder
from tt_models.tt.seq2seq_generator import Seq2SeqGenerator


class WhisperForConditionalGeneration(Seq2SeqGenerator):
    """Whisper on TT-NN: log-mel ``input_features [n_mels, 3000]`` in, 1500 encoder positions."""

    max_cross_attn_tokens = 1500
    encoder_input_key = "input_features"

    @classmethod
    def build_encoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any,
                      precision: Precision) -> WhisperEncoder:
        return WhisperEncoder(args, state, device, precision)

    @classmethod
    def build_decoder(cls, args: Seq2SeqArgs, state: dict[str, torch.Tensor], device: Any,
                      precision: Precision) -> Seq2SeqDecoder:
        lm_head = state.get("proj_out.weight", state["model.decoder.embed_tokens.weight"])  # tied
        return Seq2SeqDecoder(args, state, device, precision, lm_head=lm_head)

    def dummy_encoder_input(self, args: Seq2SeqArgs) -> dict[str, torch.Tensor]:
        n_mels = self.models[0].encoder.n_mels
        return {"input_features": torch.zeros(n_mels, 2 * args.max_source_positions)}
