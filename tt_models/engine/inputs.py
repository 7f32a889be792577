"""Request prompts (vLLM's formats: ``tt_models.engine.prompts``) turned into the decoder token ids and encoder
inputs a generator takes.

The decoder prompt rules follow seeds/vllm-encoder-decoder-infrastructure.md section 1 ("Supported
encoder/decoder prompt formats") and vLLM 0.25.1 (``vllm/inputs/engine.py``,
``vllm/model_executor/models/whisper.py``):

- Decoder-only: text is tokenized with special tokens (vLLM's default ``add_special_tokens=True``); token
  ids are taken as given.
- BART / MBart: a singleton prompt is the encoder prompt and the decoder gets the default ``<DEC><BOS>``;
  an explicit decoder prompt is tokenized like the encoder's (with special tokens, so the seed's
  ``[2, 0, 51, 178, 2]`` is a decoder text's ``<s> ... </s>`` after ``<DEC>``) and gets ``<DEC>``
  prepended unless it already starts with it. ``<DEC>`` is ``decoder_start_token_id``, falling back to
  ``<BOS>`` as vLLM does (MBart configs have none), which makes MBart's default ``<BOS>`` alone.
- Whisper: the audio comes as ``multi_modal_data={"audio": (waveform, sample_rate)}`` and a singleton's
  text (or token ids) is the decoder prompt, tokenized without special tokens (vLLM's Whisper processing
  info) and given ``<|startoftranscript|>`` when it lacks it. Without one, the decoder prompt is the one
  HF's ``generate`` forces from the generation config: ``<|startoftranscript|>`` [language, task]
  ``<|notimestamps|>``, the language and task tokens only for multilingual models (language ``en`` and
  task ``transcribe`` unless ``process`` or the generation config says otherwise, as openai-whisper's
  ``decode`` does; ``tt_models.speech`` detects a language before building the prompt).
- Llama 3.2 Vision (image+text): a singleton prompt whose text (or token ids) holds one ``<|image|>`` token per
  image in ``multi_modal_data={"image": PIL.Image or [PIL.Image]}`` (at most one; none: a text-only request).
  Text is tokenized as HF's ``MllamaProcessor`` does it: ``<|begin_of_text|>`` added after the leading image
  tokens unless the text has it (a chat template's output does). The image is the request's encoder input;
  its cross blocks hold ``max_num_tiles * patches`` vision tokens.
- Qwen2.5-VL and Gemma 3 (image tokens in the prompt): text (or token ids) with one placeholder per image in
  ``multi_modal_data={"image": ...}`` (at most ``MAX_PROMPT_IMAGES``), as the chat template writes it (Qwen2.5-VL's
  ``<|vision_start|><|image_pad|><|vision_end|>``, Gemma 3's ``<start_of_image>``); text is tokenized as vLLM does
  (special tokens added: Qwen's tokenizer adds none), except Gemma 3 with a chat template, whose text gets none (the
  template writes ``<bos>``; as tt-models registers Gemma 3 with vLLM, and as vLLM's Gemma 4 does). The checkpoint's
  image processor makes each image's pixels, and each placeholder is expanded to the image's tokens as HF's and
  vLLM's processors do (``image_placeholders``).

Every problem with a request raises ``ValueError`` naming it, so the engine can fail that request alone.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr
import torch
from PIL import Image
from transformers import GenerationConfig, PretrainedConfig, PreTrainedTokenizerBase, WhisperFeatureExtractor
from transformers.models.mllama.processing_mllama import build_string_from_input
from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

from tt_models.audio import load_audio
from tt_models.checkpoints.whisper_generation import require_engine_fields
from tt_models.engine.config import decoder_config, has_prompt_images, is_image_text
from tt_models.engine.config import max_encoder_len as model_max_encoder_len
from tt_models.engine.image_placeholders import expand, placeholder_id
from tt_models.engine.prompts import ParsedPrompt, PromptType, is_explicit, parse_singleton, split_encoder_decoder


@dataclass(frozen=True)
class ProcessedInputs:
    """One request's model inputs and the prompts its output reports.

    ``encoder_input`` is the ``encoder_inputs[i]`` entry of the generators' ``prefill_forward``:
    ``{"input_ids": LongTensor[S]}`` (BART, MBart) or ``{"input_features": FloatTensor[n_mels, 3000]}``
    (Whisper, whose encoder takes no tokens: ``encoder_prompt_token_ids`` is empty). ``encoder_len`` is the
    number of cross-attention positions: ``S``, or Whisper's ``max_source_positions``; 0 for decoder-only.
    """

    prompt_token_ids: list[int]
    prompt: str | None
    encoder_prompt_token_ids: list[int] | None = None
    encoder_prompt: str | None = None
    encoder_input: dict[str, torch.Tensor] | None = None
    encoder_len: int = 0
    # Qwen2.5-VL and Gemma 3: the images' ``prefill_forward`` arguments, one entry per image (``pixel_values``, and
    # Qwen2.5-VL's ``image_grid_thw``), handed to every prefill of the request past its first image token (chunks
    # holding image tokens and recomputation rerun the vision tower).
    prompt_images: dict[str, list[torch.Tensor]] | None = None


MAX_IMAGES_PER_REQUEST = 1  # Llama 3.2 Vision on TT: one image's cross blocks per request
MAX_PROMPT_IMAGES = 4  # Qwen2.5-VL and Gemma 3, as tt-models registers them with vLLM (tt_models/vllm/multimodal.py)


def max_images_per_request(hf_config: PretrainedConfig) -> int:
    return MAX_PROMPT_IMAGES if has_prompt_images(hf_config) else MAX_IMAGES_PER_REQUEST


class InputProcessor:
    """Turns prompts into :class:`ProcessedInputs` for one model.

    ``max_model_len`` bounds the decoder sequence (prompt plus output); ``max_encoder_len`` the encoder
    input, by default the model's own limit (BART ``max_position_embeddings``, Whisper
    ``max_source_positions``). Whisper's default decoder prompt comes from its ``generation_config`` (a request
    that needs a field it lacks is refused, naming it); its feature extractor from ``processor`` (a default
    ``WhisperFeatureExtractor`` without one).
    """

    def __init__(
        self,
        hf_config: PretrainedConfig,
        tokenizer: PreTrainedTokenizerBase | None,
        *,
        processor: Any = None,
        generation_config: GenerationConfig | None = None,
        max_model_len: int,
        max_encoder_len: int | None = None,
    ) -> None:
        self.hf_config, self.tokenizer, self.max_model_len = hf_config, tokenizer, max_model_len
        self.vocab_size: int = decoder_config(hf_config).vocab_size
        self.is_whisper = hf_config.model_type == "whisper"
        self.is_encoder_decoder = bool(getattr(hf_config, "is_encoder_decoder", False))
        self.image_token_id: int | None = None
        if has_prompt_images(hf_config):
            self.image_token_id, self.image_processor = placeholder_id(hf_config), processor
        if is_image_text(hf_config):
            self.image_token_id = hf_config.image_token_index
            self.max_encoder_len = model_max_encoder_len(hf_config)
        if not self.is_encoder_decoder:
            return
        # vLLM's get_dec_start_token_id: <BOS> when the config names no decoder start token.
        self.decoder_start_token_id = hf_config.decoder_start_token_id
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = hf_config.bos_token_id
        if self.decoder_start_token_id is None:
            raise ValueError(f"{hf_config.model_type} config has neither decoder_start_token_id nor bos_token_id")
        if self.is_whisper:
            model_limit = hf_config.max_source_positions
            self.generation_config = generation_config
            extractor = getattr(processor, "feature_extractor", processor)
            if extractor is None:
                extractor = WhisperFeatureExtractor(feature_size=hf_config.num_mel_bins)
            self.feature_extractor: WhisperFeatureExtractor = extractor
        else:
            model_limit = hf_config.max_position_embeddings
            if hf_config.bos_token_id is None:
                raise ValueError(f"{hf_config.model_type} config has no bos_token_id for the default decoder prompt")
        self.max_encoder_len = model_limit if max_encoder_len is None else max_encoder_len
        if self.is_whisper and self.max_encoder_len < model_limit:
            raise ValueError(f"max_encoder_len {self.max_encoder_len} is below Whisper's {model_limit} encoder "
                             "positions: no audio would fit")

    def process(self, prompt: PromptType, *, language: str | None = None, task: str | None = None,
                previous_text: str | None = None) -> ProcessedInputs:
        """The inputs for ``prompt``. ``language`` and ``task`` choose Whisper's default decoder prompt, and
        ``previous_text`` conditions it on earlier text (the OpenAI transcription ``prompt``): as HF's
        ``prompt_ids`` and openai-whisper do, ``<|startofprev|>`` and the text's last tokens come first."""
        if not self.is_whisper and (language is not None or task is not None or previous_text is not None):
            raise ValueError(f"language, task and previous_text are Whisper parameters; "
                             f"{self.hf_config.model_type} takes none of them")
        if self.is_whisper:
            return self._process_whisper(prompt, language, task, previous_text)
        if self.is_encoder_decoder:
            return self._process_encoder_decoder(prompt)
        if has_prompt_images(self.hf_config):
            return self._process_prompt_images(prompt)
        if self.image_token_id is not None:
            return self._process_image_text(prompt)
        if is_explicit(prompt):
            raise ValueError(f"ExplicitEncoderDecoderPrompt is for encoder-decoder models; "
                             f"{self.hf_config.model_type} is decoder-only")
        parsed = parse_singleton(prompt, "prompt")
        self._reject_multi_modal(parsed, "prompt")
        token_ids = self._nonempty_token_ids(parsed, "prompt", add_special_tokens=True)
        self._check_decoder_len(token_ids, "prompt")
        return ProcessedInputs(token_ids, parsed.text)

    def _process_encoder_decoder(self, prompt: PromptType) -> ProcessedInputs:
        encoder, decoder = split_encoder_decoder(prompt)
        self._reject_multi_modal(encoder, "encoder prompt")
        encoder_ids = self._nonempty_token_ids(encoder, "encoder prompt", add_special_tokens=True)
        if len(encoder_ids) > self.max_encoder_len:
            raise ValueError(f"The encoder prompt (length {len(encoder_ids)}) is longer than the maximum encoder "
                             f"length of {self.max_encoder_len}")
        if decoder is None:  # the seed's default <DEC><BOS>: vLLM v0 starts from [<BOS>] and prepends <DEC>
            decoder_ids, decoder_text = self._with_decoder_start([self.hf_config.bos_token_id]), None
        else:
            self._reject_multi_modal(decoder, "decoder prompt")
            decoder_ids = self._with_decoder_start(self._token_ids(decoder, "decoder prompt", True))
            decoder_text = decoder.text
        self._check_decoder_len(decoder_ids, "decoder prompt")
        encoder_input = {"input_ids": torch.tensor(encoder_ids, dtype=torch.long)}
        return ProcessedInputs(decoder_ids, decoder_text, encoder_ids, encoder.text, encoder_input, len(encoder_ids))

    def _process_image_text(self, prompt: PromptType) -> ProcessedInputs:
        if is_explicit(prompt):
            raise ValueError(f"{self.hf_config.model_type} takes a prompt with <|image|> tokens and "
                             "multi_modal_data={'image': ...}, not an ExplicitEncoderDecoderPrompt")
        parsed = parse_singleton(prompt, "prompt")
        images = _images(parsed.multi_modal_data, self.hf_config.model_type)
        if parsed.token_ids is None and parsed.text and self.tokenizer is not None:
            image_token = self.tokenizer.convert_ids_to_tokens(self.image_token_id)
            parsed = ParsedPrompt(build_string_from_input(parsed.text, self.tokenizer.bos_token, image_token),
                                  None, parsed.multi_modal_data)
            token_ids = self._nonempty_token_ids(parsed, "prompt", add_special_tokens=False)
        else:
            token_ids = self._nonempty_token_ids(parsed, "prompt", add_special_tokens=True)
        count = token_ids.count(self.image_token_id)
        if count != len(images):
            raise ValueError(f"The prompt has {count} <|image|> tokens for {len(images)} images: give one "
                             "<|image|> token per image")
        self._check_decoder_len(token_ids, "prompt")
        if not images:
            return ProcessedInputs(token_ids, parsed.text)
        return ProcessedInputs(token_ids, parsed.text, encoder_input={"image": images[0]},
                               encoder_len=self.max_encoder_len)

    def _process_prompt_images(self, prompt: PromptType) -> ProcessedInputs:
        placeholder = self.tokenizer.convert_ids_to_tokens(self.image_token_id) if self.tokenizer else "placeholder"
        if is_explicit(prompt):
            raise ValueError(f"{self.hf_config.model_type} takes a prompt with one {placeholder} per image and "
                             "multi_modal_data={'image': ...}, not an ExplicitEncoderDecoderPrompt")
        parsed = parse_singleton(prompt, "prompt")
        images = _images(parsed.multi_modal_data, self.hf_config.model_type, MAX_PROMPT_IMAGES)
        # Gemma 3's chat template writes <bos>, which its tokenizer would add again.
        special = not (self.hf_config.model_type == "gemma3" and getattr(self.tokenizer, "chat_template", None))
        token_ids = self._nonempty_token_ids(parsed, "prompt", add_special_tokens=special)
        count = token_ids.count(self.image_token_id)
        if count != len(images):
            raise ValueError(f"The prompt has {count} {placeholder} tokens for {len(images)} images: give one "
                             f"{placeholder} token per image (the chat template writes them)")
        prompt_images = None
        if images:
            if self.image_processor is None:
                raise ValueError(f"{self.hf_config.model_type} needs the checkpoint's preprocessor_config.json "
                                 "to take images")
            token_ids, prompt_images = expand(self.hf_config, self.tokenizer, self.image_processor, token_ids, images)
        self._check_decoder_len(token_ids, "prompt")
        return ProcessedInputs(token_ids, parsed.text, prompt_images=prompt_images)

    def _process_whisper(self, prompt: PromptType, language: str | None, task: str | None,
                         previous_text: str | None) -> ProcessedInputs:
        if is_explicit(prompt):
            encoder, decoder = split_encoder_decoder(prompt)
            if not encoder.is_empty:
                raise ValueError("Whisper's encoder takes only audio: give the text as the decoder_prompt")
            if decoder is not None and decoder.multi_modal_data:
                raise ValueError("The decoder prompt cannot carry multi-modal data; give the audio to the encoder")
        else:
            encoder = parse_singleton(prompt, "prompt")
            decoder = encoder  # vLLM's Whisper request: the text is the decoder prompt, the audio the encoder's
        if decoder is None or decoder.is_empty:
            decoder_ids, decoder_text = self.whisper_prompt_ids(language, task, previous_text=previous_text), None
        elif language is not None or task is not None or previous_text is not None:
            raise ValueError("language, task and previous_text shape the default decoder prompt; this request "
                             "gives its own")
        else:
            decoder_ids = self._token_ids(decoder, "decoder prompt", False)
            if not self._starts_with_previous_text(decoder_ids):
                decoder_ids = self._with_decoder_start(decoder_ids)
            decoder_text = decoder.text
        self._check_decoder_len(decoder_ids, "decoder prompt")
        features = self._features(encoder.multi_modal_data)
        encoder_len = self.hf_config.max_source_positions
        return ProcessedInputs(decoder_ids, decoder_text, [], None, {"input_features": features}, encoder_len)

    # ---------------------------------------------------------------------------------------- token ids

    def _token_ids(self, parsed: ParsedPrompt, what: str, add_special_tokens: bool) -> list[int]:
        if parsed.token_ids is not None:
            token_ids = parsed.token_ids
        elif self.tokenizer is None:
            raise ValueError(f"The model has no tokenizer: give the {what} as token ids")
        else:
            token_ids = list(self.tokenizer.encode(parsed.text, add_special_tokens=add_special_tokens))
        bad = [t for t in token_ids if not 0 <= t < self.vocab_size and t != self.image_token_id]
        if bad:
            raise ValueError(f"Token id {bad[0]} in the {what} is out of vocabulary: the model's token ids are "
                             f"0 to {self.vocab_size - 1}")
        return token_ids

    def _nonempty_token_ids(self, parsed: ParsedPrompt, what: str, add_special_tokens: bool) -> list[int]:
        if parsed.is_empty:
            raise ValueError(f"The {what} is empty")
        return self._token_ids(parsed, what, add_special_tokens)

    def _with_decoder_start(self, token_ids: list[int]) -> list[int]:
        """vLLM's ``_prepare_decoder_input_ids_for_generation``: ``<DEC>`` first, added only when missing."""
        if not token_ids or token_ids[0] != self.decoder_start_token_id:
            return [self.decoder_start_token_id, *token_ids]
        return token_ids

    def _check_decoder_len(self, token_ids: list[int], what: str) -> None:
        """vLLM 0.25.1 (``_validate_prompt_len``) also rejects a prompt that fills ``max_model_len``: no room
        is left for an output token."""
        if len(token_ids) >= self.max_model_len:
            raise ValueError(f"The {what} (length {len(token_ids)}) plus at least one output token is longer "
                             f"than the maximum model length of {self.max_model_len}")

    def _reject_multi_modal(self, parsed: ParsedPrompt, what: str) -> None:
        if parsed.multi_modal_data:
            raise ValueError(f"{self.hf_config.model_type} takes no multi-modal data; the {what} has "
                             f"{sorted(parsed.multi_modal_data)}")

    # ---------------------------------------------------------------------------------------- Whisper

    def whisper_prompt_ids(self, language: str | None = None, task: str | None = None, *, timestamps: bool = False,
                           previous_text: str | None = None) -> list[int]:
        """Whisper's decoder prompt: [``<|startofprev|>`` and the last tokens of ``previous_text``,]
        ``<|startoftranscript|>`` [language, task,] and ``<|notimestamps|>`` unless ``timestamps``. Raises
        ValueError for a language or task the checkpoint does not take, and naming the generation config's fields
        it needs that the checkpoint lacks."""
        ids = self._whisper_default_prompt(language, task)
        if timestamps:
            ids = ids[:-1]
        return self._previous_text_ids(previous_text) + ids if previous_text else ids

    def _starts_with_previous_text(self, token_ids: list[int]) -> bool:
        """A decoder prompt in HF's ``prompt_ids`` form: ``<|startofprev|>`` text ``<|startoftranscript|>`` ..."""
        if not token_ids or self.tokenizer is None:
            return False
        start_of_prev = self.tokenizer.convert_tokens_to_ids("<|startofprev|>")
        return token_ids[0] == start_of_prev and self.decoder_start_token_id in token_ids

    def _whisper_default_prompt(self, language: str | None, task: str | None) -> list[int]:
        """The prefix HF's Whisper ``generate`` forces: start, [language, task,] no timestamps."""
        config = self.generation_config
        require_engine_fields(config, self.tokenizer)
        language = language if language is not None else getattr(config, "language", None) or "en"
        task = task if task is not None else getattr(config, "task", None) or "transcribe"
        language_token = _language_token(language)
        middle: list[int] = []
        if getattr(config, "is_multilingual", False):
            lang_to_id, task_to_id = config.lang_to_id, config.task_to_id
            if language_token not in lang_to_id:
                raise ValueError(f"Unsupported language {language!r} for this Whisper model: use a code or token "
                                 f"from its generation config's lang_to_id (e.g. {list(lang_to_id)[:4]})")
            if task not in task_to_id:
                raise ValueError(f"Unsupported task {task!r} for Whisper: use one of {sorted(task_to_id)}")
            middle = [lang_to_id[language_token], task_to_id[task]]
        elif language_token != "<|en|>" or task != "transcribe":
            raise ValueError(f"This Whisper model is English-only: it cannot take language={language!r}, "
                             f"task={task!r} (only English transcription)")
        return [self.decoder_start_token_id, *middle, config.no_timestamps_token_id]

    def _previous_text_ids(self, text: str) -> list[int]:
        """``<|startofprev|>`` and the last ``max_target_positions // 2 - 1`` tokens of `` text``."""
        if self.tokenizer is None:
            raise ValueError("previous_text needs the model's tokenizer")
        ids = self.tokenizer.encode(" " + text.strip(), add_special_tokens=False)
        keep = self.hf_config.max_target_positions // 2 - 1
        return [self.tokenizer.convert_tokens_to_ids("<|startofprev|>"), *ids[-keep:]]

    def _features(self, multi_modal_data: Mapping[str, Any] | None) -> torch.Tensor:
        """The log-mel features ``[n_mels, 3000]`` of the request's one audio, padded to 30 s as HF pads."""
        if not multi_modal_data or "audio" not in multi_modal_data:
            raise ValueError("Whisper needs audio: multi_modal_data={'audio': (waveform, sample_rate)}")
        others = sorted(set(multi_modal_data) - {"audio"})
        if others:
            raise ValueError(f"Whisper takes only audio; unsupported multi-modal data: {others}")
        item = multi_modal_data["audio"]
        if isinstance(item, list):
            if len(item) != 1:
                raise ValueError(f"Whisper takes one audio per request, got {len(item)}")
            item = item[0]
        extractor = self.feature_extractor
        waveform = audio_waveform(item, extractor.sampling_rate, extractor.chunk_length)
        features = extractor(waveform, sampling_rate=extractor.sampling_rate, return_tensors="np")
        return torch.from_numpy(np.ascontiguousarray(features["input_features"][0], dtype=np.float32))


def audio_waveform(item: Any, rate: int, max_seconds: float | None = None) -> np.ndarray:
    """``item`` as float32 mono at ``rate``: ``(waveform, sample_rate)``, a waveform already at ``rate``
    (vLLM's audio items), or the bytes of an audio file; at most ``max_seconds`` long (None: any length)."""
    too_long = (f"Audio longer than Whisper's {max_seconds} s window is not supported in one request: "
                f"LLM.transcribe (and the server) cut longer audio into windows of at most {max_seconds} s")
    if max_seconds is None:
        max_seconds = math.inf
    if isinstance(item, (bytes, bytearray, memoryview)):
        samples = load_audio(item, rate)
        if samples.size > max_seconds * rate:
            raise ValueError(f"{too_long}; got {samples.size / rate:.2f} s")
        return samples
    source_rate = rate
    if isinstance(item, tuple):
        if len(item) != 2:
            raise ValueError(f"An audio tuple is (waveform, sample_rate), got {len(item)} items")
        item, source_rate = item
        if isinstance(source_rate, bool) or not isinstance(source_rate, numbers.Integral) or source_rate <= 0:
            raise ValueError(f"The audio sample rate must be a positive integer (Hz), got {source_rate!r}")
        source_rate = int(source_rate)
    if isinstance(item, torch.Tensor):
        if not item.is_floating_point():
            raise ValueError(f"Not audio: the waveform must be floating point in [-1, 1], got {item.dtype}")
        item = item.detach().cpu().float().numpy()
    if not isinstance(item, np.ndarray):
        raise ValueError(f"Not audio: expected (waveform, sample_rate), a waveform at {rate} Hz, or the bytes "
                         f"of an audio file; got {type(item).__name__}")
    if item.dtype.kind != "f":
        raise ValueError(f"Not audio: the waveform must be floating point in [-1, 1], got {item.dtype}")
    if item.ndim != 1 or item.size == 0:
        raise ValueError(f"Not audio: the waveform must be 1-D mono with samples, got shape {item.shape}")
    if not np.isfinite(item).all():
        raise ValueError("Not audio: the waveform has NaN or infinite samples")
    if item.size > max_seconds * source_rate:
        raise ValueError(f"{too_long}; got {item.size / source_rate:.2f} s")
    samples = item.astype(np.float32, copy=False)
    if source_rate != rate:  # as tt_models.audio.load_audio resamples
        samples = soxr.resample(samples, source_rate, rate, quality="HQ")
    return samples


def _images(multi_modal_data: Mapping[str, Any] | None, model_type: str,
            limit: int = MAX_IMAGES_PER_REQUEST) -> list[Image.Image]:
    """The request's images (vLLM's ``{"image": image or [images]}``): at most ``limit``, each a PIL image."""
    if not multi_modal_data:
        return []
    others = sorted(set(multi_modal_data) - {"image"})
    if others:
        raise ValueError(f"{model_type} takes only images; unsupported multi-modal data: {others}")
    images = multi_modal_data["image"]
    images = list(images) if isinstance(images, (list, tuple)) else [images]
    if len(images) > limit:
        raise ValueError(f"{model_type} on TT takes at most {limit} image{'s' if limit > 1 else ''} per request, "
                         f"got {len(images)}")
    for image in images:
        if not isinstance(image, Image.Image):
            raise ValueError(f"Not an image: multi_modal_data['image'] must be a PIL.Image.Image, "
                             f"got {type(image).__name__}")
    return images


def _language_token(language: str) -> str:
    """``"en"``, ``"english"`` or ``"<|en|>"`` as the token ``"<|en|>"``."""
    if not isinstance(language, str):
        raise ValueError(f"language must be a string such as 'en', got {language!r}")
    if language.startswith("<|") and language.endswith("|>"):
        return language
    code = TO_LANGUAGE_CODE.get(language.lower(), language.lower())
    return f"<|{code}|>"
