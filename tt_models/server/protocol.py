"""OpenAI API bodies (the subset tt-models serves) as pydantic models.

Names, defaults and shapes follow the OpenAI API reference. Fields marked "vLLM extra" are vLLM's additions,
which OpenAI clients send through ``extra_body``. Unknown request fields are ignored, as OpenAI's and vLLM's
servers ignore them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from tt_models.engine.sampling import SamplingParams
from tt_models.engine.structured_output import StructuredOutputsParams
from tt_models.speech import Segment


class OpenAIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")


# Common.


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tt-models"
    root: str
    max_model_len: int  # vLLM extra


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class StreamOptions(OpenAIRequest):
    include_usage: bool = False


class JsonSchemaFormat(OpenAIRequest):
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")  # (pydantic's models own ``schema``)
    strict: bool | None = None


class ResponseFormat(OpenAIRequest):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


# vLLM's older extra fields, each one kind of structured outputs constraint.
_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


class SamplingRequest(OpenAIRequest):
    """The generation fields completions and chat share."""

    model: str
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None
    # vLLM extras.
    structured_outputs: dict[str, Any] | None = None  # StructuredOutputsParams' fields
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    min_tokens: int = 0
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def sampling_params(self, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
        """The engine's parameters; raises ValueError naming a bad or unsupported value."""
        if self.logit_bias:
            raise ValueError("logit_bias is not supported")
        if logprobs is not None and not 0 <= logprobs <= 20:
            raise ValueError(f"logprobs must be in 0..20, got {logprobs}")
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
            seed=self.seed, stop=self.stop, stop_token_ids=self.stop_token_ids, max_tokens=max_tokens,
            min_tokens=self.min_tokens, presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty, repetition_penalty=self.repetition_penalty,
            ignore_eos=self.ignore_eos, logprobs=logprobs, skip_special_tokens=self.skip_special_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output,
            structured_outputs=self.structured_outputs_params())

    def structured_outputs_params(self) -> StructuredOutputsParams | None:
        """The request's constraint, from vLLM's ``structured_outputs``, the ``guided_*`` fields and
        ``response_format`` together (as vLLM merges them: more than one kind is refused); raises ValueError."""
        constraint = dict(self.structured_outputs or {})
        constraint.update((kind, getattr(self, name)) for name, kind in _GUIDED.items()
                          if getattr(self, name) is not None)
        response_format = self.response_format
        if response_format is not None and response_format.type == "json_object":
            constraint["json_object"] = True
        elif response_format is not None and response_format.type == "json_schema":
            if response_format.json_schema is None or response_format.json_schema.json_schema is None:
                raise ValueError("response_format of type json_schema needs json_schema.schema")
            constraint["json"] = response_format.json_schema.json_schema
        if not constraint:
            return None
        try:
            return StructuredOutputsParams(**constraint)
        except TypeError as error:  # a field StructuredOutputsParams does not have
            raise ValueError(f"structured_outputs: {error}") from None


# /v1/completions.


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    # vLLM extra: for encoder-decoder models ``prompt`` is the encoder prompt and this the decoder's.
    decoder_prompt: str | list[int] | None = None

    def check_supported(self) -> None:
        for name, value in (("echo", self.echo), ("suffix", self.suffix)):
            if value:
                raise ValueError(f"{name} is not supported")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError(f"best_of is not supported (got best_of={self.best_of}, n={self.n})")


class CompletionLogprobs(BaseModel):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # vLLM extra: the stop string or token that ended it


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


# /v1/chat/completions.


class ImageURL(OpenAIRequest):
    url: str
    detail: str | None = None  # OpenAI's resolution hint; the model's image processor decides


class ContentPart(OpenAIRequest):
    type: str
    text: str | None = None
    image_url: ImageURL | None = None

    @model_validator(mode="after")
    def _image_part_has_url(self) -> ContentPart:
        if self.type == "image_url" and self.image_url is None:
            raise ValueError("an image_url content part needs image_url: {\"url\": ...}")
        return self


class FunctionDefinition(OpenAIRequest):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments object
    strict: bool | None = None


class ChatTool(OpenAIRequest):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(OpenAIRequest):
    name: str


class NamedToolChoice(OpenAIRequest):
    type: Literal["function"] = "function"
    function: NamedFunction


class CalledFunction(OpenAIRequest):
    name: str
    arguments: str | dict[str, Any] | None = None  # OpenAI's JSON text; vLLM also takes the object


class MessageToolCall(OpenAIRequest):
    """A call of an earlier assistant message, sent back with the conversation."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction

    def for_template(self) -> dict[str, Any]:
        """As HF's templates take it (vLLM's ``_postprocess_messages``): the arguments as an object."""
        arguments = self.function.arguments or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as error:
                raise ValueError(f"tool_calls: the arguments of {self.function.name!r} are not JSON: {error}") from None
        call = {"type": "function", "function": {"name": self.function.name, "arguments": arguments}}
        return call if self.id is None else {"id": self.id, **call}


class ChatMessage(OpenAIRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None  # assistant messages
    tool_call_id: str | None = None  # tool messages: the call they answer

    @model_validator(mode="after")
    def _tool_fields_fit_the_role(self) -> ChatMessage:
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls are for assistant messages, not {self.role}")
        return self

    def image_urls(self) -> list[str]:
        """The URLs of the message's image parts, in order."""
        if not isinstance(self.content, list):
            return []
        return [part.image_url.url for part in self.content if part.type == "image_url" and part.image_url]

    def for_template(self, with_images: bool = False) -> dict[str, Any]:
        """The message as chat templates take it. For text-only models, text content parts joined by newlines (as
        vLLM joins them); for image+text models (``with_images``), the parts in order as HF's templates take them,
        ``{"type": "image"}`` where an image goes (the template writes the model's image token there)."""
        content = self.content
        if isinstance(content, list):
            allowed = ("text", "image_url") if with_images else ("text",)
            other = [part.type for part in content if part.type not in allowed]
            if other:
                raise ValueError(f"only {' and '.join(allowed)} content parts are supported, got {other[0]!r}")
            if with_images:
                content = [{"type": "image"} if part.type == "image_url" else {"type": "text", "text": part.text or ""}
                           for part in content]
            else:
                content = "\n".join(part.text or "" for part in content)
        message = {"role": self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.for_template() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None  # (tools' default: "auto")
    parallel_tool_calls: bool | None = True
    # vLLM extras.
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    def chat_sampling_params(self) -> SamplingParams:
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        return self.sampling_params(max_tokens, (self.top_logprobs or 0) if self.logprobs else None)


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class FunctionCall(BaseModel):
    name: str
    arguments: str  # a JSON text


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # vLLM extra


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class _WithoutNone(BaseModel):
    """Leaves unset fields out: the openai client's stream helpers take a ``null`` ``type`` in a later delta of a
    tool call for a new value."""

    @model_serializer(mode="wrap")
    def _without_none(self, handler: Any) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class DeltaFunctionCall(_WithoutNone):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_WithoutNone):
    """A call's first delta has its id, type and name; later ones add to its arguments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


# /v1/audio/transcriptions and /v1/audio/translations.

AudioResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt"]


class DurationUsage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float


class TokenUsage(BaseModel):
    type: Literal["tokens"] = "tokens"
    input_tokens: int
    output_tokens: int
    total_tokens: int


class Transcription(BaseModel):
    text: str
    usage: DurationUsage


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float


class TranscriptionVerbose(BaseModel):
    """OpenAI's ``verbose_json``: ``segments`` and ``words`` as ``timestamp_granularities`` asks (None: left out of
    the response)."""

    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    text: str
    segments: list[Segment] | None = None  # OpenAI's segment fields, as tt_models.speech defines them
    words: list[TranscriptionWord] | None = None
    usage: DurationUsage

    def response_json(self) -> str:
        """The response body: the granularities not asked for are left out, as OpenAI leaves them out."""
        return self.model_dump_json(exclude={name for name in ("segments", "words") if getattr(self, name) is None})


class TranscriptDelta(BaseModel):
    type: Literal["transcript.text.delta"] = "transcript.text.delta"
    delta: str


class TranscriptDone(BaseModel):
    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str
    usage: TokenUsage
