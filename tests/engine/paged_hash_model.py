"""A generator with the contract's interface and a real paged cache, but no math: the engine's referee.

The K pool holds token ids. Prefill writes a row's tokens from the block boundary before ``start_pos`` to its
end (whole blocks: the rest of the last block is clobbered, as ``paged_fill_cache`` writes whole tiles), decode
writes one token at ``start_pos``; both then read the whole sequence back through the page table (and the
encoder tokens through the cross table) and return logits that depend on every token read. A wrong slot, a
block shared when it should not be, a stale page-table entry, a lost swap or a missing cross block changes
the next token, so outputs equal to each request's solo run mean the engine's bookkeeping was right.

Logits have two equal maxima (greedy takes the lower id; seeded random sampling picks either), so the
sequences of an ``n > 1`` request diverge.

:class:`FeedbackHashModel` also samples greedily "on the device" and, like a TT model under async decode, takes each
row's token and position from its own previous step when told ``reset_batch=False``: an engine that says so when a
row changed (joined, left, was preempted) changes the outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import BartConfig, LlamaConfig

from tt_models.checkpoints import Checkpoint

POISON = -7  # what fresh and clobbered cache slots hold
VOCAB = 97


def _hash(tokens: list[int]) -> int:
    h = 0
    for t in tokens:
        h = (h * 1_000_003 + t + 11) % (1 << 61)
    return h


class PagedHashModel:
    model_capabilities = {"supports_prefix_caching": True}

    def __init__(self, max_num_seqs: int, encoder_decoder: bool = False, max_cross_attn_tokens: int = 0) -> None:
        self.max_num_seqs = max_num_seqs
        self.encoder_decoder = encoder_decoder
        self.max_cross_attn_tokens = max_cross_attn_tokens
        self.calls: list[str] = []
        self.prefill_chunks: list[list[tuple[int, int]]] = []  # per prefill call, each row's (start_pos, end)
        self.prefill_encoders: list[list[int]] = []  # per prefill call, each row's encoder input length (0: none)
        self.decode_tables: list[list[tuple[list[int], list[int]]]] = []  # per decode call, each live row's tables

    def allocate_kv_cache(self, shape: Any, dtype: Any = None, num_layers: int | None = None) -> list[np.ndarray]:
        num_blocks, _, self.block_size, _ = shape
        self.cache = np.full((num_blocks, self.block_size), POISON, dtype=np.int64)
        return [self.cache]

    # Cache access through a table.

    def _slots(self, table: torch.Tensor, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        positions = np.arange(start, end)
        return table.numpy()[positions // self.block_size], positions % self.block_size

    def _write(self, table: torch.Tensor, start: int, tokens: list[int]) -> None:
        blocks, offsets = self._slots(table, start, start + len(tokens))
        self.cache[blocks, offsets] = tokens

    def _read(self, table: torch.Tensor, length: int) -> list[int]:
        blocks, offsets = self._slots(table, 0, length)
        return self.cache[blocks, offsets].tolist()

    def _logits(self, seq: list[int], cross: list[int]) -> torch.Tensor:
        h = _hash(seq + [-1] + cross)
        logits = torch.zeros(VOCAB)
        logits[[h % VOCAB, (h // VOCAB) % VOCAB]] = 20.0
        return logits

    def _cross(self, cross_page_table: Any, encoder_lens: Any, row: int) -> list[int]:
        if not self.encoder_decoder:
            return []
        return self._read(cross_page_table[row], int(encoder_lens[row]))

    # The contract.

    def prefill_forward(self, *, tokens: torch.Tensor, page_table: torch.Tensor, kv_cache: Any, prompt_lens: Any,
                        start_pos: Any = None, cross_page_table: Any = None, encoder_inputs: Any = None,
                        encoder_lens: Any = None, **kwargs: Any) -> torch.Tensor:
        self.calls.append("prefill")
        self.prefill_chunks.append([])
        self.prefill_encoders.append([])
        out = []
        for i, end in enumerate(np.asarray(prompt_lens).tolist()):
            start = 0 if start_pos is None else int(start_pos[i])
            self.prefill_chunks[-1].append((start, end))
            has_encoder = self.encoder_decoder and encoder_inputs[i] is not None
            self.prefill_encoders[-1].append(int(encoder_lens[i]) if has_encoder else 0)
            boundary = start // self.block_size * self.block_size
            self._write(page_table[i], boundary, tokens[i, boundary:end].tolist())
            clobber_end = -(-end // self.block_size) * self.block_size
            self._write(page_table[i], end, [POISON] * (clobber_end - end))
            if self.encoder_decoder and encoder_inputs[i] is not None:
                ids = encoder_inputs[i]["input_ids"].tolist()
                assert len(ids) == int(encoder_lens[i])
                self._write(cross_page_table[i], 0, ids)
            out.append(self._logits(self._read(page_table[i], end), self._cross(cross_page_table, encoder_lens, i)))
        return torch.stack(out)[:, None]

    def decode_forward(self, *, tokens: torch.Tensor, start_pos: torch.Tensor, page_table: torch.Tensor,
                       kv_cache: Any, cross_page_table: Any = None, encoder_lens: Any = None,
                       read_from_device: bool = True, **kwargs: Any) -> torch.Tensor:
        self.calls.append("decode")
        assert tokens.shape[0] == self.max_num_seqs, "decode is padded to max_num_seqs"
        out = torch.zeros(self.max_num_seqs, 1, VOCAB)
        self.decode_tables.append([(page_table[row].tolist(), [] if cross_page_table is None else
                                    cross_page_table[row].tolist()) for row, pos in enumerate(start_pos.tolist())
                                   if pos >= 0])
        for row, pos in enumerate(start_pos.tolist()):
            if pos < 0:
                continue
            self._write(page_table[row], pos, [int(tokens[row, 0])])
            out[row, 0] = self._logits(self._read(page_table[row], pos + 1),
                                       self._cross(cross_page_table, encoder_lens, row))
        return out

    def read_decode_output(self, tt_out: Any, **kwargs: Any) -> Any:
        return tt_out

    def process_decode_output_host(self, tt_out: Any, **kwargs: Any) -> torch.Tensor:
        return tt_out

    def read_kv_blocks(self, kv_cache: Any, block_ids: Any, replicas: Any = None) -> list[torch.Tensor]:
        return [torch.from_numpy(self.cache[list(block_ids)].copy())[None, None]]  # one replica

    def write_kv_blocks(self, kv_cache: Any, block_ids: Any, data: list[torch.Tensor], replicas: Any = None) -> None:
        self.cache[list(block_ids)] = data[0][0, 0].numpy()


class FeedbackHashModel(PagedHashModel):
    model_capabilities = {"supports_prefix_caching": True, "supports_sample_on_device": True,
                          "supports_async_decode": True}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fed: tuple[torch.Tensor, torch.Tensor] | None = None  # the last device-sampled step's tokens, positions
        self.fed_steps = 0

    def decode_forward(self, *, tokens: torch.Tensor, start_pos: torch.Tensor, sampling_params: Any = None,
                       reset_batch: bool | None = None, **kwargs: Any) -> torch.Tensor:
        if sampling_params is not None and reset_batch is False:
            tokens, positions = self.fed
            start_pos = torch.where(positions >= 0, positions + 1, positions)
            self.fed_steps += 1
        logits = super().decode_forward(tokens=tokens, start_pos=start_pos, **kwargs)
        if sampling_params is None:
            self.fed = None
            return logits
        sampled = logits[:, 0].argmax(-1)
        self.fed = sampled[:, None], torch.as_tensor(start_pos)
        return sampled


def checkpoint(encoder_decoder: bool) -> Checkpoint:
    """A config-only checkpoint (no weights, no tokenizer: prompts are token ids)."""
    if encoder_decoder:
        config = BartConfig(vocab_size=VOCAB, max_position_embeddings=256, d_model=64, encoder_layers=1,
                            decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    else:
        config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=256, hidden_size=64, num_hidden_layers=1,
                             num_attention_heads=2)
    return Checkpoint(config, {}, None, Path("paged-hash-model"))
