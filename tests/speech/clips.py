"""Synthetic speech in five languages, made at test time with espeak-ng, and HF's language detection of it.

espeak-ng's voices are robotic, so whisper-base is not sure of every one of them (French is its least sure, at
about 0.37 against 0.14 for the next language); these sentences are the ones it detects as their language in
float32. The reference is HF's ``WhisperForConditionalGeneration.detect_language`` with the very weights the
engine loads, in float32, on the very samples the engine and the server decode from the same WAV bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import WhisperForConditionalGeneration

from tt_models.audio import load_audio
from tt_models.checkpoints import load_hf_checkpoint

SENTENCES = {  # espeak-ng voice (= Whisper's language code): text
    "en": "The weather is lovely today, so we are going for a long walk in the park.",
    "de": "Das Wetter ist heute sehr schön, deshalb gehen wir lange im Park spazieren.",
    "fr": "Il fait très beau aujourd'hui, alors nous allons faire une longue promenade dans le parc.",
    "es": "Hoy hace muy buen tiempo, así que vamos a dar un largo paseo por el parque.",
    "it": "Oggi il tempo è bellissimo, quindi andiamo a fare una lunga passeggiata nel parco.",
}
SAMPLE_RATE = 16000


def espeak_wavs(directory: Path) -> dict[str, bytes]:
    """Each sentence spoken by espeak-ng in its language, as the bytes of a WAV file."""
    assert shutil.which("espeak-ng"), "espeak-ng is missing: run scripts/setup.sh (apt-get install -y espeak-ng)"
    wavs = {}
    for code, text in SENTENCES.items():
        path = directory / f"{code}.wav"
        subprocess.run(["espeak-ng", "-v", code, "-w", str(path), text], check=True, capture_output=True)
        wavs[code] = path.read_bytes()
    return wavs


@dataclass(frozen=True)
class Reference:
    language: str  # the code HF's detect_language picks
    probabilities: dict[str, float]  # softmax over the language tokens' logits, most likely first


def hf_detect(wavs: dict[str, bytes]) -> dict[str, Reference]:
    """HF float32 ``detect_language`` of each clip (one encoder pass for all), with its distribution."""
    checkpoint = load_hf_checkpoint("whisper-base")
    model = WhisperForConditionalGeneration(checkpoint.config).eval()
    model.load_state_dict(checkpoint.state_dict, strict=True)
    generation = checkpoint.generation_config
    audio = [load_audio(wav, SAMPLE_RATE) for wav in wavs.values()]
    features = checkpoint.processor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
    lang_to_id = generation.lang_to_id
    codes = [token[2:-2] for token in lang_to_id]
    with torch.inference_mode():
        encoded = model.model.encoder(features)
        detected = model.detect_language(encoder_outputs=encoded, generation_config=generation).tolist()
        start = torch.full((len(audio), 1), generation.decoder_start_token_id)
        logits = model(encoder_outputs=encoded, decoder_input_ids=start).logits[:, -1]
    probs = logits[:, list(lang_to_id.values())].double().softmax(dim=-1).tolist()
    id_to_code = {token_id: code for code, token_id in zip(codes, lang_to_id.values())}
    return {key: Reference(id_to_code[token_id], dict(sorted(zip(codes, p), key=lambda item: -item[1])))
            for key, token_id, p in zip(wavs, detected, probs)}
