"""A long-form transcription run over the async engine with its text reported as it grows: what a streamed
``/v1/audio/transcriptions`` response and a Realtime session's turn share.

The transcription asks for rounds of engine requests (its windows, then whatever it decodes again); each round is
submitted beside other clients' requests, and while a round that decodes windows runs, the transcript's text so far
(``LongFormTranscription.text``: it only grows) is yielded each time it grows.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tt_models.engine.outputs import RequestOutput
from tt_models.server.async_engine import AsyncEngine, RequestStream
from tt_models.server.serving import submit
from tt_models.server.streaming import merge
from tt_models.speech import LongFormTranscription, Transcript


@dataclass(frozen=True)
class Transcribed:
    """The end of the run: the transcript and the tokens its requests read and wrote."""

    transcript: Transcript
    prompt_tokens: int
    output_tokens: int


async def growing_text(job: LongFormTranscription, engine: AsyncEngine, request_id: str,
                       streams: list[RequestStream]) -> AsyncIterator[str | Transcribed]:
    """The transcript's text each time it grows, then :class:`Transcribed`. ``streams`` holds the running round's
    requests, for the caller to close when it stops early (which aborts those under way)."""
    steps = job.steps()
    outputs: list[RequestOutput] | None = None
    sent = ""
    prompt_tokens = output_tokens = 0
    for round_ in itertools.count():
        try:
            batch = steps.send(outputs)
        except StopIteration as done:
            yield Transcribed(done.value, prompt_tokens, output_tokens)
            return
        streams[:] = await submit(engine, f"{request_id}-{round_}", batch.prompts, batch.params)
        latest: list[RequestOutput | None] = [None] * len(streams)
        async for index, output in merge(streams):
            latest[index] = output
            if batch.windows:
                text = job.text(latest)
                if len(text) > len(sent):
                    sent = text
                    yield text
        outputs = latest
        prompt_tokens += sum(len(o.prompt_token_ids) for o in outputs)
        output_tokens += sum(len(o.outputs[0].token_ids) for o in outputs)
