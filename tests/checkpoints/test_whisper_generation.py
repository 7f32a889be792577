"""An HF Whisper directory whose ``generation_config.json`` was written from the model config (as ``save_pretrained``
writes it for a model built from a config), or that has none: the loader derives Whisper's fields from the
tokenizer, so the engine decodes as with the real generation config. A directory of a config and weights alone (no
tokenizer to derive them from) still loads: TT vLLM's generator class needs none of them, and the engine refuses,
naming the missing fields, only the requests that need them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoConfig, GenerationConfig, GenerationMixin, WhisperConfig, WhisperForConditionalGeneration

from tests.models.vllm_driver import Request, VllmDriver, teacher_forced_pcc
from tt_models import LLM
from tt_models.audio import speech_sample
from tt_models.checkpoints import Checkpoint, load_hf_checkpoint
from tt_models.engine.sampling import SamplingParams
from tt_models.models.whisper.generator import WhisperForConditionalGeneration as TTWhisper
from tt_models.testing.seq2seq import SIZES, WHISPER, encoder_input, tiny_seq2seq

SAMPLE_RATE = 16000
MAX_BATCH, BLOCK, NUM_BLOCKS, MAX_LEN = 4, 32, 32, 64
NEW_TOKENS = 8


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


def save_config_and_weights(model: WhisperForConditionalGeneration, directory: Path) -> Path:
    """``model`` saved as model bring-up tests save a tiny random one: ``config.json`` and the weights only (without
    the generation config ``save_pretrained`` writes, and no tokenizer)."""
    model.save_pretrained(directory)
    (directory / "generation_config.json").unlink()
    assert sorted(path.name for path in directory.iterdir()) == ["config.json", "model.safetensors"]
    return directory


@pytest.mark.parametrize("name, written", [("whisper-tiny.en", True), ("whisper-base", True),
                                           ("whisper-tiny.en", False)], ids=["tiny.en", "base", "tiny.en-without-one"])
def test_generation_config_is_completed_as_the_real_one(tmp_path, name, written):
    """English-only and multilingual (``lang_to_id``, ``task_to_id``): every field of the hub's has its value, but
    the alignment heads, which come from the weights, not the tokenizer (word timestamps refuse such a directory)."""
    real = load_hf_checkpoint(name)
    loaded = load_hf_checkpoint(save_hf_directory(real, tmp_path, generation_config=written))
    expected = {k: v for k, v in real.generation_config.to_diff_dict().items()
                if k not in ("transformers_version", "alignment_heads")}
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


def test_vllm_model_of_config_and_weights_alone_matches_hf(host_device, tmp_path):
    """TT vLLM's path for a tiny random English-only Whisper directory of config and weights alone:
    ``initialize_vllm_model`` (under TT vLLM, vLLM's own processor builds the decoder prompt), then prefills and
    decode steps as TT vLLM calls them (keyword arguments, paged cross-attention, a request joining mid-run; host
    backend, accuracy profile, bfloat16 KV cache). Teacher-forced along HF's greedy continuation, every step's logits
    have PCC >= 0.99 with HF's ``WhisperForConditionalGeneration`` float32 forward of the same directory on the same
    inputs."""
    directory = save_config_and_weights(tiny_seq2seq("whisper-en"), tmp_path)
    config = AutoConfig.from_pretrained(directory)
    model = TTWhisper.initialize_vllm_model(config, host_device, MAX_BATCH, max_seq_len=MAX_LEN, tt_data_parallel=1,
                                            optimizations="accuracy")
    replica = model.models[0]
    kv = model.allocate_kv_cache((NUM_BLOCKS, config.decoder_attention_heads, BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)
    model.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=False)
    model.warmup_model_decode(kv_cache=kv, enable_trace=False, max_batch_size=MAX_BATCH, num_blocks=MAX_LEN // BLOCK)
    hf = WhisperForConditionalGeneration.from_pretrained(directory, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(5)
    requests, sequences, hf_logits = [], [], []
    for i, prompt_len in enumerate((2, 5, 3)):
        ours, hf_inputs, encoder_len = encoder_input(hf, config.max_source_positions, seed=10 + i)
        prompt = torch.randint(3, 300, (prompt_len,), generator=g)
        prompt[0] = config.decoder_start_token_id  # <|startoftranscript|>, as vLLM's processor starts the prompt
        with torch.no_grad():
            sequence = GenerationMixin.generate(
                hf, **hf_inputs, decoder_input_ids=prompt[None], max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)[0]
            hf_logits.append(hf(**hf_inputs, decoder_input_ids=sequence[None]).logits[0])
        sequences.append(sequence)
        requests.append(Request(tokens=prompt.tolist(), prompt_len=prompt_len, encoder_input=ours,
                                encoder_len=encoder_len))
    driver = VllmDriver(model, kv, max_batch_size=MAX_BATCH, num_blocks=NUM_BLOCKS, block_size=BLOCK,
                        width=MAX_LEN // BLOCK, cross_width=-(-config.max_source_positions // BLOCK))
    scores, _ = teacher_forced_pcc(driver, requests, sequences, hf_logits, slots=(1, 3, 0), join_after=3,
                                   new_tokens=NEW_TOKENS, delivery="decode")
    print(f"\n{len(scores)} steps, min PCC {min(scores):.5f}")
    assert len(scores) == 3 * (1 + NEW_TOKENS) and min(scores) >= 0.99  # a prefill and NEW_TOKENS decodes each


def test_the_engine_refuses_the_requests_that_need_what_cannot_be_derived(tmp_path):
    """tt-models' engine starts on a directory of config and weights alone (a tiny random English-only Whisper with
    1500 encoder positions, the engine's 30 s features) and runs a request with its own decoder prompt; a request for
    the default decoder prompt (a transcription, a prompt of audio alone) or for the timestamp rules is refused when
    it is added, naming the field the generation config lacks."""
    torch.manual_seed(0)
    config = WhisperConfig(**SIZES, **{**WHISPER, "max_source_positions": 1500}, vocab_size=51864)
    directory = save_config_and_weights(WhisperForConditionalGeneration(config), tmp_path)
    audio = (np.zeros(SAMPLE_RATE, np.float32), SAMPLE_RATE)
    own_prompt = {"encoder_prompt": {"prompt": "", "multi_modal_data": {"audio": audio}},
                  "decoder_prompt": {"prompt_token_ids": [config.decoder_start_token_id]}}
    lacking = re.escape("Whisper's generation config lacks no_timestamps_token_id, and the checkpoint has no "
                        "tokenizer to derive them from")
    with LLM(str(directory), backend="host", max_num_seqs=1) as llm:
        with pytest.raises(ValueError, match=lacking):
            llm.transcribe(audio)
        with pytest.raises(ValueError, match=lacking):
            llm.generate({"prompt": "", "multi_modal_data": {"audio": audio}})
        with pytest.raises(ValueError, match=lacking):
            llm.generate(own_prompt, SamplingParams(max_tokens=3, extra_args={"timestamps": True}))
        [output] = llm.generate(own_prompt, SamplingParams(max_tokens=3, temperature=0.0), use_tqdm=False)
    assert len(output.outputs[0].token_ids) == 3
