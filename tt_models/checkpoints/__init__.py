"""Real-checkpoint loading (HF directories, the local HF cache, GGUF files) into HF-named state dicts."""

from tt_models.checkpoints.loader import ALIASES, Checkpoint, load_hf_checkpoint
from tt_models.checkpoints.smollm2 import smollm2_135m_instruct_path

__all__ = ["ALIASES", "Checkpoint", "load_hf_checkpoint", "smollm2_135m_instruct_path"]
