"""Whisper transcripts of real speech against HF ``generate`` at several precisions, in the same run.

The bundled 30 s two-speaker call (whole, and each reference segment) is transcribed greedily by the engine
in both optimizations profiles and by HF ``generate`` on the same weights: in float32 (the reference), in
float32 with the weights rounded to bfloat16 (what the accuracy profile stores), and in bfloat16. Each is
compared with the float32 reference: transcripts identical, and at the first differing token of each other
transcript how far its token's logit lies below the reference's choice there (the reference model's logits,
so a small margin is a near-tie the reference itself barely decides). Word error rates against the
reference transcript (``sample.stm``) for the whole clip and for the segments.

It shows how much of the gap to float32 HF is bfloat16 alone: HF on the weights rounded to bfloat16 misses
its float32 transcripts at the same near-ties as the accuracy profile (and one more).

    .venv/bin/python bench/whisper_speech_accuracy.py [--max-tokens 160]
"""

from __future__ import annotations

import argparse

import torch
import transformers
from transformers import WhisperForConditionalGeneration

from tt_models import LLM, SamplingParams
from tt_models.audio import speech_sample, word_error_rate
from tt_models.checkpoints import load_hf_checkpoint
from tt_models.runtime import default_backend

CHECKPOINT = "whisper-tiny.en"


def hf_model(checkpoint, dtype: torch.dtype, round_weights: bool = False) -> WhisperForConditionalGeneration:
    model = WhisperForConditionalGeneration(checkpoint.config).eval()
    state = checkpoint.state_dict
    if round_weights:
        state = {name: t.to(torch.bfloat16).to(t.dtype) for name, t in state.items()}
    model.load_state_dict(state, strict=True)
    return model.to(dtype)


def first_difference_margin(reference: WhisperForConditionalGeneration, features: torch.Tensor, prompt: list[int],
                            ours: list[int], theirs: list[int]) -> str:
    """``token k: margin`` at the first differing token."""
    k = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if k is None:  # one hit max_tokens where the other ended
        return f"length {len(ours)} vs {len(theirs)}"
    with torch.inference_mode():
        logits = reference(input_features=features[None], decoder_input_ids=torch.tensor([prompt + ours[:k]])).logits
    margin = float(logits[0, -1, theirs[k]] - logits[0, -1, ours[k]])
    return f"token {k}: {margin:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()

    checkpoint = load_hf_checkpoint(CHECKPOINT)
    audio, rate, segments = speech_sample()
    clips = [audio] + [audio[int(s.start * rate): int(s.end * rate)] for s in segments]
    references = [" ".join(s.text for s in segments)] + [s.text for s in segments]
    tokenizer, eos = checkpoint.tokenizer, checkpoint.generation_config.eos_token_id
    features = checkpoint.processor.feature_extractor(clips, sampling_rate=rate, return_tensors="pt").input_features

    def text_tokens(ids: list[int]) -> list[int]:
        """Text tokens then EOS (HF pads finished rows with EOS; an early EOS is a difference like any token)."""
        return [t for t in ids if t != eos] + [eos]

    runs: dict[str, list[list[int]]] = {}
    prompts = [{"prompt": "", "multi_modal_data": {"audio": (clip, rate)}} for clip in clips]
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    for profile in ("accuracy", "performance"):
        with LLM(CHECKPOINT, max_num_seqs=len(clips), optimizations=profile) as llm:
            outputs = llm.generate(prompts, params, use_tqdm=False)
        runs[f"tt-models {profile} ({default_backend()})"] = [text_tokens(o.outputs[0].token_ids) for o in outputs]
        decoder_prompt = list(outputs[0].prompt_token_ids)

    hf_variants = {
        "HF float32 (reference)": hf_model(checkpoint, torch.float32),
        "HF float32, bf16 weights": hf_model(checkpoint, torch.float32, round_weights=True),
        "HF bfloat16": hf_model(checkpoint, torch.bfloat16),
    }
    for name, model in hf_variants.items():
        with torch.inference_mode():
            out = model.generate(features.to(model.dtype), generation_config=checkpoint.generation_config,
                                 max_new_tokens=args.max_tokens)
        runs[name] = [text_tokens(row) for row in out.tolist()]

    reference_name = "HF float32 (reference)"
    reference, reference_tokens = hf_variants[reference_name], runs[reference_name]
    print(f"\nWhisper {CHECKPOINT}, greedy, {len(clips)} clips (whole call + {len(segments)} segments), "
          f"vs {reference_name}")
    print(f"{'run':<34} {'identical':>9} {'WER whole':>9} {'WER segs':>8}  first difference (logit margin)")
    for name, tokens in runs.items():
        texts = tokenizer.batch_decode(tokens, skip_special_tokens=True)
        same = sum(a == b for a, b in zip(tokens, reference_tokens))
        diffs = [f"clip {i} {first_difference_margin(reference, features[i], decoder_prompt, a, b)}"
                 for i, (a, b) in enumerate(zip(tokens, reference_tokens)) if a != b]
        print(f"{name:<34} {same:>4}/{len(clips):<4} {word_error_rate(references[0], texts[0]):>9.3f} "
              f"{word_error_rate(references[1:], texts[1:]):>8.3f}  {'; '.join(diffs) or '-'}")


if __name__ == "__main__":
    main()
