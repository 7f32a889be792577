"""Real-checkpoint loading (HF directories, the local HF cache, GGUF files, CTranslate2 Whisper) into HF-named
state dicts."""

from tt_models.checkpoints.ct2_model_bin import read_ct2_model
from tt_models.checkpoints.loader import ALIASES, Checkpoint, load_hf_checkpoint
from tt_models.checkpoints.smollm2 import smollm2_135m_instruct_path
from tt_models.checkpoints.whisper_ct2 import whisper_base_path, whisper_tiny_en_path

__all__ = [
    "ALIASES",
    "Checkpoint",
    "load_hf_checkpoint",
    "read_ct2_model",
    "smollm2_135m_instruct_path",
    "whisper_base_path",
    "whisper_tiny_en_path",
]
