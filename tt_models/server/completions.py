"""POST /v1/completions: one engine request per prompt (text or token ids), ``n`` choices each.

For encoder-decoder models the prompt is the encoder prompt and the vLLM extra ``decoder_prompt`` the
decoder's (else the model's default decoder start).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from fastapi import Request, Response

from tt_models.engine.llm_engine import LLMEngine
from tt_models.engine.outputs import CompletionOutput
from tt_models.engine.prompts import PromptType
from tt_models.engine.sampling import SamplingParams
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.errors import engine_errors
from tt_models.server.protocol import CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse
from tt_models.server.serving import finish, json_response, new_id, submit, usage
from tt_models.server.streaming import Deltas, event_stream, merge, sse


def engine_prompts(body: CompletionRequest, engine: LLMEngine, model_name: str) -> list[PromptType]:
    """The request's prompts as the engine takes them; raises ValueError naming what does not fit the model."""
    if engine.checkpoint.config.model_type == "whisper":
        raise ValueError(f"{model_name} transcribes audio: use /v1/audio/transcriptions")
    if body.decoder_prompt is not None and not engine.is_encoder_decoder:
        raise ValueError(f"decoder_prompt is for encoder-decoder models; {model_name} is decoder-only")
    prompts = body.prompt
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not prompts:
        raise ValueError("prompt is empty")
    if body.decoder_prompt is None:
        return list(prompts)
    return [{"encoder_prompt": p, "decoder_prompt": body.decoder_prompt} for p in prompts]


def completion_logprobs(seq: CompletionOutput, start: int, top: int) -> CompletionLogprobs:
    """OpenAI's legacy logprobs of tokens ``start:``: each token's text, logprob, text offset (in the whole
    output), and the sampled token with the ``top`` most likely ones."""
    out = CompletionLogprobs()
    offset = 0
    for i, (token_id, entry) in enumerate(zip(seq.token_ids, seq.logprobs or ())):
        chosen = entry[token_id]
        text = chosen.decoded_token or ""
        if i >= start:
            out.tokens.append(text)
            out.token_logprobs.append(chosen.logprob)
            out.text_offset.append(offset)
            out.top_logprobs.append({(lp.decoded_token or ""): lp.logprob for t, lp in entry.items()
                                     if t == token_id or (lp.rank is not None and lp.rank <= top)})
        offset += len(text)
    return out


def _choice(body: CompletionRequest, index: int, seq: CompletionOutput, text: str, start: int) -> CompletionChoice:
    logprobs = None if body.logprobs is None else completion_logprobs(seq, start, body.logprobs)
    return CompletionChoice(index=index * body.n + seq.index, text=text, logprobs=logprobs,
                            finish_reason=seq.finish_reason, stop_reason=seq.stop_reason)


async def create_completion(body: CompletionRequest, engine: AsyncEngine, model_name: str,
                            request: Request) -> Response:
    with engine_errors():
        body.check_supported()
        prompts = engine_prompts(body, engine.engine, model_name)
        params = body.sampling_params(body.max_tokens, body.logprobs)
    response_id, created = new_id("cmpl")
    streams = await submit(engine, response_id, prompts, params, max_tokens_param="max_tokens")
    if body.stream:
        return event_stream(_events(body, params, streams, response_id, created, model_name), streams)
    outputs = await finish(request, streams)
    if outputs is None:
        return json_response(None)
    choices = [_choice(body, i, seq, seq.text, 0) for i, output in enumerate(outputs) for seq in output.outputs]
    return json_response(CompletionResponse(id=response_id, created=created, model=model_name,
                                            choices=sorted(choices, key=lambda c: c.index), usage=usage(outputs)))


async def _events(body: CompletionRequest, params: SamplingParams, streams: Sequence[RequestStream],
                  response_id: str, created: int, model_name: str) -> AsyncIterator[str]:
    deltas = Deltas(params)
    finals = {}
    async for index, output in merge(streams):
        finals[index] = output
        choices = []
        for seq in output.outputs:
            advanced = deltas.advance((index, seq.index), seq)
            if advanced is not None:
                choices.append(_choice(body, index, seq, *advanced))
        if choices:
            yield sse(CompletionResponse(id=response_id, created=created, model=model_name, choices=choices))
    if body.include_usage:
        yield sse(CompletionResponse(id=response_id, created=created, model=model_name, choices=[],
                                     usage=usage(list(finals.values()))))
