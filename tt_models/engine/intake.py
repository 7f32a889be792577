"""Where a request enters an engine: what every engine of a deployment does alike before a request reaches its
model. The checkpoint's config is resolved, prompts are processed by one ``InputProcessor``, and a new request's id
and sampling parameters are checked, so an encode instance (``tt_models.disagg``) refuses bad input with the very
errors a prefill-decode instance gives."""

from __future__ import annotations

from typing import Generic, TypeVar

from tt_models.checkpoints import Checkpoint
from tt_models.checkpoints.whisper_generation import require_engine_fields
from tt_models.engine.config import EngineConfig, max_encoder_len
from tt_models.engine.inputs import InputProcessor, ProcessedInputs
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import SamplingParams

R = TypeVar("R")  # an engine's request


class RequestIntake(Generic[R]):
    """The base of the engines: ``checkpoint``, its ``tokenizer``, ``config`` resolved against the model, the
    prompt ``processor``, and the engine's ``requests`` by id."""

    def __init__(self, checkpoint: Checkpoint, config: EngineConfig) -> None:
        hf_config = checkpoint.config
        self.checkpoint = checkpoint
        self.tokenizer = checkpoint.tokenizer
        self.is_encoder_decoder = bool(getattr(hf_config, "is_encoder_decoder", False))
        self.config = config.resolve(hf_config, max_encoder_len(hf_config))
        self.processor = InputProcessor(hf_config, checkpoint.tokenizer, processor=checkpoint.processor,
                                        generation_config=checkpoint.generation_config,
                                        max_model_len=self.config.max_model_len)
        self.requests: dict[str, R] = {}

    def _accept(self, request_id: str, prompt: PromptType, params: SamplingParams | None, *,
                language: str | None, task: str | None, previous_text: str | None,
                max_tokens_param: str | None = None) -> tuple[SamplingParams, ProcessedInputs]:
        """A new request's sampling parameters (default: vLLM's) and processed prompt. Raises ValueError naming the
        problem: an id in use, parameters the model cannot take, a bad prompt. ``max_tokens_param``: the name the
        client gave ``max_tokens`` under; a ``max_tokens`` over what the context leaves after the prompt is then
        refused naming it, as vLLM's server refuses it (else the output ends where the context does)."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling params must be a SamplingParams, got {type(params).__name__}")
        params.verify(self.processor.vocab_size, None if self.tokenizer is None else len(self.tokenizer))
        inputs = self.processor.process(prompt, language=language, task=task, previous_text=previous_text)
        if self.processor.is_whisper and (params.extra_args or {}).get("timestamps"):  # the timestamp rules' tokens
            require_engine_fields(self.processor.generation_config, self.tokenizer)
        if max_tokens_param is not None and params.max_tokens is not None:
            _check_room(params.max_tokens, len(inputs.prompt_token_ids), self.config.max_model_len, max_tokens_param)
        return params, inputs


def _check_room(max_tokens: int, prompt_len: int, max_model_len: int, param: str) -> None:
    """vLLM's server's check and message: a request may ask for no more tokens than its prompt leaves."""
    if max_tokens > max_model_len - prompt_len:
        raise ValueError(f"'{param}' is too large: {max_tokens}. This model's maximum context length is "
                         f"{max_model_len} tokens and your request has {prompt_len} input tokens ({max_tokens} > "
                         f"{max_model_len} - {prompt_len}).")
