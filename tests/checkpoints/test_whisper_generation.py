"""An HF Whisper directory whose ``generation_config.json`` was written from the model config (as ``save_pretrained``
writes it for a model built from a config), or that has none: the loader derives Whisper's fields from the
tokenizer, so the engine decodes as with the real generation config; what cannot be derived is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import GenerationConfig, WhisperForConditionalGeneration

from tt_models import LLM
from tt_models.audio import speech_sample
from tt_models.checkpoints import Checkpoint, load_hf_checkpoint

SAMPLE_RATE = 16000


def save_hf_directory(checkpoint: Checkpoint, directory: Path, *, generation_config: bool = True,
                      tokenizer: bool = True) -> Path:
    """``checkpoint``'s config and weights as an HF directory, with the generation config HF writes for a model
    built from a config (or none), and its tokenizer (or none)."""
    model = WhisperForConditionalGeneration(checkpoint.config)
    model.load_state_dict(checkpoint.state_dict)
    model.save_pretrained(directory)
    (directory / "generation_config.json").unlink()
    if generation_config:
        GenerationConfig.from_model_config(checkpoint.config).save_pretrained(directory)
    if tokenizer:
        checkpoint.tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("name, written", [("whisper-tiny.en", True), ("whisper-base", True),
                                           ("whisper-tiny.en", False)], ids=["tiny.en", "base", "tiny.en-without-one"])
def test_generation_config_is_completed_as_the_real_one(tmp_path, name, written):
    """English-only and multilingual (``lang_to_id``, ``task_to_id``): every field of the hub's has its value."""
    real = load_hf_checkpoint(name)
    loaded = load_hf_checkpoint(save_hf_directory(real, tmp_path, generation_config=written))
    expected = {k: v for k, v in real.generation_config.to_diff_dict().items() if k != "transformers_version"}
    assert {k: getattr(loaded.generation_config, k, None) for k in expected} == expected


def test_the_engine_transcribes_as_with_the_real_generation_config(tmp_path):
    """Timestamp tokens too (the timestamp rules read ``no_timestamps_token_id`` and
    ``max_initial_timestamp_index``)."""
    audio, rate, segments = speech_sample()
    clip = audio[int(segments[0].start * rate):int(segments[0].end * rate)]
    directory = save_hf_directory(load_hf_checkpoint("whisper-tiny.en"), tmp_path)
    transcripts = []
    for model in ("whisper-tiny.en", str(directory)):
        with LLM(model, backend="host", optimizations="accuracy", max_num_seqs=1) as llm:
            transcripts.append(llm.transcribe((clip, rate), timestamps=True, temperature=0.0))
    real, completed = transcripts
    assert completed.text and completed == real


def test_what_cannot_be_derived_is_named(tmp_path):
    directory = save_hf_directory(load_hf_checkpoint("whisper-tiny.en"), tmp_path, tokenizer=False)
    with pytest.raises(ValueError, match=f"{directory}: Whisper's generation config lacks no_timestamps_token_id, "
                                         "and the checkpoint has no tokenizer to derive them from"):
        load_hf_checkpoint(directory)
