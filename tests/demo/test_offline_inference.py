"""``demo/offline_inference_tt.py`` run as users run it (a subprocess, host backend).

The bundled default job transcribes real speech and answers chat prompts; ``--test_increasing_seq_lens``
completes for Whisper tiny.en, a tiny BART and a tiny Llama with SmolLM2's tokenizer, every length reaching
``max_tokens``.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tt_models.testing.chat_checkpoints import write_tiny_chat_checkpoint
from tt_models.testing.seq2seq import tiny_seq2seq

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "offline_inference_tt.py"


def _demo(*args: str) -> str:
    result = subprocess.run([sys.executable, str(DEMO), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_default_job_transcribes_speech_and_answers_prompts():
    out = _demo("--max_tokens", "12", "--greedy_sampling")
    whisper, smollm2 = out.split("=== smollm2-135m-instruct")
    # The clip's first words and a segment transcribed whole ("And this is Diane in New Jersey." in sample.stm).
    assert re.search(r"\[0\] audio -> ' Hello", whisper)
    assert "New Jersey" in whisper
    assert "Paris" in smollm2
    for job in (whisper, smollm2):
        assert re.search(r"TTFT \d+ ms \| [\d.]+ t/s/u \| [\d.]+ t/s", job)


# Decoder limits below the models' contexts (Whisper's 448, SmolLM2's 8192) keep the host prefills short: the sweep
# reaching whatever limit it is given is the point.
@pytest.mark.parametrize("model, decoder_limit, encoder_limit", [
    ("whisper-tiny.en", 128, "audio   30 s"),
    ("bart", 128, "encoder prompt   128 tokens"),
    ("tiny-chat-llama", 128, None),
])
def test_increasing_seq_lens_completes(model, decoder_limit, encoder_limit, tmp_path):
    args = ["--max_tokens", "4", "--greedy_sampling", "--max_model_len", str(decoder_limit)]
    if model == "bart":
        tiny_seq2seq("bart").save_pretrained(tmp_path)  # max_position_embeddings 128
        model = str(tmp_path)
    elif model == "tiny-chat-llama":  # the lengths are the point, not SmolLM2's words
        model = str(write_tiny_chat_checkpoint(tmp_path))
    out = _demo("--model", model, "--test_increasing_seq_lens", *args)
    cases = re.findall(r"^(.*): (\d+) tokens \((\w+)\)", out, re.MULTILINE)
    assert re.search(rf"test_increasing_seq_lens: {len(cases)} lengths completed", out)
    assert len(cases) >= 5 and all(n == "4" and reason == "length" for _, n, reason in cases), out
    prompts = [int(re.search(r"(\d+) tokens", label).group(1)) for label, _, _ in cases
               if "prompt" in label and "encoder" not in label]
    assert max(prompts) == decoder_limit - 4, f"the sweep should reach the decoder limit, got {max(prompts)}"
    if encoder_limit:
        assert any(label.strip().startswith(encoder_limit) for label, _, _ in cases), out
