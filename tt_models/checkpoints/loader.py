"""Load a real checkpoint as an HF config, an HF-named state dict and its tokenizer.

CTranslate2 Whisper directories (faster-whisper's ``model.bin``) are read by ``whisper_ct2`` instead, which
maps them to HF ``WhisperForConditionalGeneration`` names and adds the processor and generation config.

Everything goes through HF transformers' own loaders, so their weight renaming is reused: for GGUF
that includes undoing llama.cpp's Q/K row permutation and dequantizing (always to dense tensors, via
``GgufConfig(dequantize=True)``); for HF directories, transformers' checkpoint conversion mapping, which renames
older on-disk layouts to the current class's names (the Llama 3.2 Vision checkpoints on the hub store
``language_model.model.*``, ``language_model.lm_head.weight``, ``vision_model.*`` and ``multi_modal_projector.*``;
transformers 5 names them ``model.language_model.*``, ``lm_head.weight``, ``model.vision_model.*`` and
``model.multi_modal_projector.*``); GPT-OSS's MXFP4 experts are dequantized (``Mxfp4Config(dequantize=True)``). The
weights are loaded once, into an HF model whose tensors the returned state dict shares; the model itself is dropped,
so only one copy stays in memory.
Nothing is downloaded: hub ids resolve only against the local HF cache.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import transformers
from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForSeq2SeqLM,
    AutoModelForSpeechSeq2Seq,
    AutoTokenizer,
    GenerationConfig,
    GgufConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

if TYPE_CHECKING:
    from transformers import BaseImageProcessor, ProcessorMixin

from tt_models.checkpoints.ct2_model_bin import is_ct2_directory
from tt_models.checkpoints.smollm2 import smollm2_135m_instruct_path
from tt_models.checkpoints.whisper_ct2 import load_ct2_whisper, whisper_base_path, whisper_tiny_en_path
from tt_models.checkpoints.whisper_generation import completed_generation_config

logger = logging.getLogger(__name__)

ALIASES: dict[str, Callable[[], Path]] = {
    "smollm2-135m-instruct": smollm2_135m_instruct_path,
    "whisper-tiny.en": whisper_tiny_en_path,
    "whisper-base": whisper_base_path,
}
"""Short names (matched case-insensitively) for checkpoints installed as Python packages."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: ``state_dict`` uses the names of the HF class in transformers 5
    (``model.layers.0.self_attn.q_proj.weight``; Llama 3.2 Vision: ``model.vision_model.*``,
    ``model.language_model.*``, ``model.multi_modal_projector.*``, ``lm_head.weight``), whatever the on-disk layout.

    With tied embeddings ``lm_head.weight`` is present and shares storage with
    ``model.embed_tokens.weight``. ``tokenizer`` is None when the directory ships none.
    ``processor`` is the processor (feature extractor + tokenizer) of speech models (CTranslate2 Whisper), or the
    image processor of Llama 3.2 Vision, Qwen2.5-VL, Qwen3-VL, Gemma 3 and Mistral 3 directories with a
    ``preprocessor_config.json``; None otherwise.
    ``generation_config``: CTranslate2 Whisper's, or an HF directory's ``generation_config.json``; None without one.
    An HF Whisper directory's is completed with the Whisper fields it lacks, as far as its tokenizer allows
    (``whisper_generation``).
    """

    config: PretrainedConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: PreTrainedTokenizerBase | None
    source: Path
    processor: ProcessorMixin | BaseImageProcessor | None = None
    generation_config: GenerationConfig | None = None


def load_hf_checkpoint(model: str | Path, *, torch_dtype: torch.dtype = torch.float32) -> Checkpoint:
    """Load ``model``: an HF directory, a ``.gguf`` file, a CTranslate2 Whisper directory, a hub id in the
    local cache, or an alias (``ALIASES``).

    Raises FileNotFoundError when the path does not exist, a directory has no ``config.json``,
    or a hub id is not in the local cache.
    """
    source = _resolve(model)
    if source.is_file():
        if source.suffix != ".gguf":
            raise ValueError(f"{source} is a file but not a .gguf; pass an HF directory or a .gguf file")
        return _load_gguf(source, torch_dtype)
    if is_ct2_directory(source):
        whisper = load_ct2_whisper(source, torch_dtype)
        return Checkpoint(whisper.config, whisper.state_dict, whisper.tokenizer, source,
                          processor=whisper.processor, generation_config=whisper.generation_config)
    if not (source / "config.json").is_file():
        ggufs = sorted(p.name for p in source.glob("*.gguf"))
        hint = f"; to load a GGUF, pass the file itself (found {ggufs})" if ggufs else ""
        raise FileNotFoundError(f"{source} is not an HF checkpoint directory: it has no config.json{hint}")
    return _load_directory(source, torch_dtype)


def _resolve(model: str | Path) -> Path:
    """The local file or directory that ``model`` names."""
    alias = ALIASES.get(str(model).lower())
    if alias is not None:
        return alias()
    path = Path(model).expanduser()
    if path.exists():
        return path
    if isinstance(model, str) and not path.is_absolute() and not model.startswith("."):
        try:
            return Path(snapshot_download(model, local_files_only=True))
        except (LocalEntryNotFoundError, HFValidationError):
            pass
    raise FileNotFoundError(
        f"Checkpoint {str(model)!r} does not exist: it is not a local path, an alias ({sorted(ALIASES)}), "
        f"or a hub id in the local HF cache (nothing is downloaded)"
    )


def _load_directory(directory: Path, dtype: torch.dtype) -> Checkpoint:
    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    weights = _model_class(config).from_pretrained(directory, config=config, dtype=dtype, local_files_only=True,
                                                   **_dequantized(config))
    has_tokenizer = any((directory / name).is_file() for name in TOKENIZER_FILES)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True) if has_tokenizer else None
    generation_config = None
    if (directory / "generation_config.json").is_file():  # e.g. Llama 3 instruct's several eos ids
        generation_config = GenerationConfig.from_pretrained(directory, local_files_only=True)
    if config.model_type == "whisper":  # a config written from the model config lacks what Whisper decodes with
        generation_config = completed_generation_config(generation_config, config, tokenizer)
    return Checkpoint(config, weights.state_dict(), tokenizer, directory, processor=_image_processor(directory, config),
                      generation_config=generation_config)


def _dequantized(config: PretrainedConfig) -> dict[str, Any]:
    """``from_pretrained``'s arguments for a quantized checkpoint: GPT-OSS's MXFP4 experts (``*_blocks``, ``*_scales``)
    dequantized by transformers' own function (``Mxfp4Dequantize``: exact in float32) whatever the host has (its
    MXFP4 kernels need Triton); the device stores them in the profile's block-float format."""
    quantization = getattr(config, "quantization_config", None)
    method = quantization.get("quant_method") if isinstance(quantization, dict) else \
        getattr(quantization, "quant_method", None)
    if method != "mxfp4":
        return {}
    from transformers import Mxfp4Config

    return {"quantization_config": Mxfp4Config(dequantize=True)}


def _image_processor(directory: Path, config: PretrainedConfig) -> BaseImageProcessor | None:
    """The image processor of a directory with a ``preprocessor_config.json``, by model type. Mllama's: the pillow
    backend. Qwen2.5-VL's, Qwen3-VL's, Gemma 3's and Mistral 3's: HF's default backend, torchvision's where installed (the one
    vLLM's processor uses, whose resize differs from pillow's by a few levels), else pillow's. Imported here, when a
    directory needs one: transformers' image processing imports torchvision, and torch's compiler with it (2 s of
    every start of a process that serves no images)."""
    if config.model_type not in ("mllama", "qwen2_5_vl", "qwen3_vl", "gemma3", "mistral3") or \
            not (directory / "preprocessor_config.json").is_file():
        return None
    from transformers import AutoImageProcessor
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    processor_class = MllamaImageProcessorPil if config.model_type == "mllama" else AutoImageProcessor
    return processor_class.from_pretrained(directory, local_files_only=True)


def _model_class(config: PretrainedConfig) -> type:
    """The HF class whose weights are the whole checkpoint: a causal-LM class would drop an encoder, and for an
    image-text model (Mllama's ``MllamaForCausalLM``) the vision encoder and projector."""
    if config.model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
        return AutoModelForSpeechSeq2Seq
    if hasattr(config, "vision_config"):
        return AutoModelForImageTextToText
    if getattr(config, "is_encoder_decoder", False):
        return AutoModelForSeq2SeqLM
    return AutoModelForCausalLM


def _load_gguf(file: Path, dtype: torch.dtype) -> Checkpoint:
    """A GGUF is converted to an HF directory once (:func:`converted_gguf_directory`); later loads read that
    directory, which takes seconds where parsing the GGUF again would take half a minute (each of transformers'
    ``from_pretrained`` calls re-parses its header, a 49k-token vocabulary for SmolLM2)."""
    directory = converted_gguf_directory(file)
    if not directory.is_dir():
        checkpoint = _convert_gguf(file, directory)
        if dtype == torch.float32:
            return checkpoint
    checkpoint = _load_directory(directory, dtype)
    checkpoint.config._name_or_path = str(file.parent)  # as the GGUF's own config names it (its default profile)
    return replace(checkpoint, source=file)


def converted_gguf_directory(file: Path) -> Path:
    """Where the HF conversion of ``file`` is kept: ``$TT_MODELS_CACHE`` (default ``~/.cache/tt-models``)
    ``/gguf/<name>-<size>-<mtime>-transformers-<version>``; a changed file or converter gets a new one."""
    root = Path(os.environ.get("TT_MODELS_CACHE") or Path.home() / ".cache" / "tt-models")
    stat = file.stat()
    return root / "gguf" / f"{file.stem}-{stat.st_size}-{stat.st_mtime_ns}-transformers-{transformers.__version__}"


def _convert_gguf(file: Path, directory: Path) -> Checkpoint:
    """Dequantize ``file`` to float32 with transformers and save it to ``directory`` (written beside it, then
    renamed into place, so a concurrent load never sees half of it)."""
    logger.info("converting %s to an HF directory once, for later loads: %s", file.name, directory)
    kwargs = {"gguf_file": file.name, "local_files_only": True}
    config = AutoConfig.from_pretrained(file.parent, **kwargs)
    weights = AutoModelForCausalLM.from_pretrained(
        file.parent, config=config, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True), **kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(file.parent, **kwargs)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.")
    try:
        weights.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # The GGUF has no generation config: its eos comes from the model config, as before the conversion.
        (Path(tmp) / "generation_config.json").unlink(missing_ok=True)
        try:
            os.rename(tmp, directory)
        except OSError:
            if not directory.is_dir():  # else another process converted it meanwhile
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing is left there after the rename
    return Checkpoint(config, weights.state_dict(), tokenizer, file)
