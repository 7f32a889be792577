"""The tiny checkpoints' tokenizers (Qwen2.5-VL's, Qwen3-VL's, Mistral 3's, Gemma 3's): byte-level BPE trained here
on ``CORPUS`` (deterministic), so that any text tokenizes below the family's special ids and decodes back exactly."""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tt_models.testing.mllama import CORPUS


def trained_bpe(first_free: int, specials: Iterable[str], reserved: str) -> Tokenizer:
    """Byte-level BPE with ``specials`` first, then merges below ``first_free``; reserved tokens (``reserved`` formatted
    with a counter) fill the ids the merges leave free, so the tokens added next land on ``first_free`` onwards."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([CORPUS], trainers.BpeTrainer(
        vocab_size=first_free, special_tokens=list(specials), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    backend.add_special_tokens([reserved.format(i) for i in range(first_free - backend.get_vocab_size())])
    return backend


def check_ids(backend: Tokenizer, expected: dict[str, int]) -> None:
    """Raise unless each token of ``expected`` has its id."""
    ids = {token: backend.token_to_id(token) for token in expected}
    if ids != expected:
        raise AssertionError(f"tiny tokenizer: special ids {ids}")
