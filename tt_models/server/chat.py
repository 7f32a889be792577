"""POST /v1/chat/completions: the messages through the model's chat template, then one engine request.

Image+text models take OpenAI's ``image_url`` content parts (``tt_models.server.images`` loads them); the
template puts the model's image token where each image was. Tools: ``tt_models.server.tools``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import jinja2
from fastapi import Request, Response

from tt_models.engine.config import takes_images as model_takes_images
from tt_models.engine.inputs import max_images_per_request
from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import CompletionOutput, Logprob
from tt_models.engine.prompts import PromptType, TextPrompt, TokensPrompt
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import engine_errors
from tt_models.server.images import load_image
from tt_models.server.media_policy import MediaPolicy
from tt_models.server.protocol import (AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionChunk,
                                       ChatCompletionRequest, ChatCompletionResponse, ChatLogprobs, Delta,
                                       TokenLogprob, TopLogprob)
from tt_models.server.serving import finish, json_response, new_id, submit, usage
from tt_models.server.streaming import Deltas, event_stream, sse
from tt_models.server.tool_stream import ToolCallDeltas, tool_message
from tt_models.server.tools import ToolPlan, finish_reason, tool_plan


async def chat_prompt(body: ChatCompletionRequest, engine: LLMEngine, model_name: str,
                      media: MediaPolicy = MediaPolicy(), plan: ToolPlan | None = None) -> PromptType:
    """The templated conversation, tokenized without adding special tokens (the template has them, as vLLM
    does it), or for a conversation with an image the template's text with the image (the engine tokenizes it
    the same way). Raises ValueError for a model without a chat template, images the model does not take or
    cannot read or ``media`` refuses, and messages the template rejects. The template is given the ``plan``'s
    tools."""
    tokenizer = engine.tokenizer
    if engine.is_encoder_decoder or tokenizer is None or not getattr(tokenizer, "chat_template", None):
        if plan is not None:
            raise ValueError(f"{model_name} does not take tools: it has no chat template")
        raise ValueError(f"{model_name} has no chat template: use /v1/completions")
    config = engine.checkpoint.config
    takes_images, max_images = model_takes_images(config), max_images_per_request(config)
    urls = [url for message in body.messages for url in message.image_urls()]
    if urls and not takes_images:
        raise ValueError(f"{model_name} does not take images: only text content parts are supported")
    if len(urls) > max_images:
        raise ValueError(f"{model_name} takes at most {max_images} image{'s' if max_images > 1 else ''} per request, "
                         f"got {len(urls)}")
    messages = [message.for_template(with_images=takes_images) for message in body.messages]
    kwargs = dict(body.chat_template_kwargs or {})
    if plan is not None:
        kwargs["tools"] = plan.tools
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=body.add_generation_prompt,
                                             **kwargs)
    except jinja2.TemplateError as error:
        raise ValueError(f"The chat template rejected the messages: {error}") from error
    if urls:
        images = [await load_image(url, media) for url in urls]
        return TextPrompt(prompt=text, multi_modal_data={"image": images[0] if len(images) == 1 else images})
    return TokensPrompt(prompt_token_ids=tokenizer.encode(text, add_special_tokens=False), prompt=text)


def _token(logprob: Logprob) -> TopLogprob:
    token = logprob.decoded_token or ""
    return TopLogprob(token=token, logprob=logprob.logprob, bytes=list(token.encode()))


def chat_logprobs(seq: CompletionOutput, start: int, top: int) -> ChatLogprobs:
    """The logprobs of tokens ``start:`` with the ``top`` most likely alternatives of each, most likely first."""
    content = []
    for token_id, step in list(zip(seq.token_ids, seq.logprobs or ()))[start:]:
        alternatives = sorted((lp for lp in step.values() if lp.rank is not None and lp.rank <= top),
                              key=lambda lp: lp.rank)
        content.append(TokenLogprob(**_token(step[token_id]).model_dump(),
                                    top_logprobs=[_token(lp) for lp in alternatives]))
    return ChatLogprobs(content=content)


def _choice(body: ChatCompletionRequest, plan: ToolPlan | None, seq: CompletionOutput) -> ChatChoice:
    reason = seq.finish_reason
    if plan is None:
        reply = AssistantMessage(content=seq.text)
    else:
        content, calls = tool_message(plan, seq.text)
        reply, reason = AssistantMessage(content=content, tool_calls=calls), finish_reason(plan, bool(calls), reason)
    return ChatChoice(index=seq.index, message=reply,
                      logprobs=chat_logprobs(seq, 0, body.top_logprobs or 0) if body.logprobs else None,
                      finish_reason=reason, stop_reason=seq.stop_reason)


async def create_chat_completion(body: ChatCompletionRequest, engine: AsyncEngine, model_name: str,
                                 request: Request) -> Response:
    with engine_errors():
        plan = tool_plan(body, request.app.state.tool_settings)
        prompt = await chat_prompt(body, engine.engine, model_name, request.app.state.media_policy, plan)
        params = plan.sampling_params(body) if plan is not None else body.chat_sampling_params()
    if plan is not None and plan.mode == "none":
        plan = None  # the output is text
    response_id, created = new_id("chatcmpl")
    limit = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    streams = await submit(engine, response_id, [prompt], params, max_tokens_param=limit)
    if body.stream:
        return event_stream(_events(body, params, plan, streams[0], response_id, created, model_name), streams)
    outputs = await finish(request, streams)
    if outputs is None:
        return json_response(None)
    choices = [_choice(body, plan, seq) for seq in outputs[0].outputs]
    return json_response(ChatCompletionResponse(id=response_id, created=created, model=model_name, choices=choices,
                                                usage=usage(outputs)))


async def _events(body: ChatCompletionRequest, params: SamplingParams, plan: ToolPlan | None, stream: RequestStream,
                  response_id: str, created: int, model_name: str) -> AsyncIterator[str]:
    def chunk(choices: list[ChatChunkChoice], **extra) -> str:
        return sse(ChatCompletionChunk(id=response_id, created=created, model=model_name, choices=choices, **extra))

    deltas = Deltas(params)
    calls = [ToolCallDeltas(plan) for _ in range(params.n)] if plan is not None else None
    final, started = None, False
    async for final in stream:
        if not started:
            # OpenAI's first chunk of each choice names the role. It goes with the first token, as vLLM sends it:
            # clients take the first chunk's arrival as the time to first token.
            started = True
            for i in range(params.n):
                yield chunk([ChatChunkChoice(index=i, delta=Delta(role="assistant", content=""))])
                if calls is not None and (announced := calls[i].advance("", False)[1]):  # a named function's call
                    yield chunk([ChatChunkChoice(index=i, delta=Delta(tool_calls=announced))])
        choices = []
        for seq in final.outputs:
            advanced = deltas.advance((0, seq.index), seq)
            if advanced is None:
                continue
            text, start = advanced
            logprobs = chat_logprobs(seq, start, body.top_logprobs or 0) if body.logprobs else None
            reason, delta = seq.finish_reason, Delta(content=text)
            if calls is not None:
                tracker = calls[seq.index]
                content, tool_calls = tracker.advance(text, final=reason is not None)
                delta = Delta(content=content, tool_calls=tool_calls or None)
                reason = finish_reason(plan, tracker.called, reason)
                if content is None and not tool_calls and not logprobs and reason is None:
                    continue  # held back: nothing to send
            choices.append(ChatChunkChoice(index=seq.index, delta=delta, logprobs=logprobs,
                                           finish_reason=reason))
        if choices:
            yield chunk(choices)
    if body.include_usage:
        yield chunk([], usage=usage([final]))
