"""Through the official OpenAI client, the server's outputs equal the offline engine's greedy outputs, streamed or
not: completions and chat (SmolLM2), completions (BART), transcriptions of real speech (Whisper tiny.en)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.server.cases import (BART, BART_EXPLICIT, BART_MAX_TOKENS, BART_PROMPTS, CHATS, LLAMA, MAX_TOKENS, PROMPTS,
                                SAMPLED, SPEECH_CONTEXT, WHISPER)

pytestmark = pytest.mark.slow


def run_all(*calls):
    """Run the calls concurrently (the engine batches them, which keeps the suite short); their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def streamed_completion(client, **kwargs) -> tuple[str, list]:
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks


def streamed_chat(client, **kwargs) -> tuple[str, list]:
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def test_models_and_health(client, http, engines):
    models = client.models.list().data
    assert [m.id for m in models] == [LLAMA, BART, WHISPER]
    assert [m.max_model_len for m in models] == [engines[m.id].config.max_model_len for m in models]
    assert http.get("/health").status_code == 200


def test_completions(client, references):
    greedy = dict(model=LLAMA, max_tokens=MAX_TOKENS, temperature=0)
    batch, tokens, *streams = run_all(
        lambda: client.completions.create(prompt=PROMPTS, **greedy),
        lambda: client.completions.create(prompt=references.tokens_prompt, **greedy),
        *(lambda p=p: streamed_completion(client, prompt=p, **greedy) for p in PROMPTS))
    expected = [o.outputs[0] for o in references.completions]
    assert [c.text for c in batch.choices] == [e.text for e in expected]
    assert [c.finish_reason for c in batch.choices] == [e.finish_reason for e in expected]
    assert batch.usage.prompt_tokens == sum(len(o.prompt_token_ids) for o in references.completions)
    assert batch.usage.completion_tokens == sum(len(e.token_ids) for e in expected)
    assert tokens.choices[0].text == references.tokens.outputs[0].text
    for (text, chunks), e in zip(streams, expected):
        assert text == e.text
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == e.finish_reason
        assert chunks[-1].usage.completion_tokens == len(e.token_ids)
        assert len([c for c in chunks if c.choices]) > 1  # streamed as it came, not in one piece


def test_chat(client, references):
    greedy = dict(model=LLAMA, max_tokens=MAX_TOKENS, temperature=0)
    results = run_all(*(lambda m=m: client.chat.completions.create(messages=m, **greedy) for m in CHATS),
                      *(lambda m=m: streamed_chat(client, messages=m, **greedy) for m in CHATS))
    plain, streams = results[:len(CHATS)], results[len(CHATS):]
    for response, (text, chunks), expected in zip(plain, streams, references.chats):
        e = expected.outputs[0]
        assert response.choices[0].message.role == "assistant"
        assert response.choices[0].message.content == e.text == text
        assert response.choices[0].finish_reason == e.finish_reason
        assert response.usage.prompt_tokens == len(expected.prompt_token_ids)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].usage.completion_tokens == len(e.token_ids)


def test_chat_stream_begins_with_the_first_token(client, engines):
    """The role chunk that opens a chat stream waits for the first token, as vLLM's server sends it: clients (vLLM's
    benchmark among them) time the first token by the first chunk. The engine's steps are held here: nothing comes
    while they are, the role chunk comes once they run."""
    engine, step = engines[LLAMA], engines[LLAMA].step
    held, release = threading.Event(), threading.Event()

    def held_step():
        held.set()
        release.wait(60)
        return step()

    engine.step = held_step
    try:
        stream = client.chat.completions.create(model=LLAMA, messages=CHATS[0], max_tokens=2, temperature=0,
                                                stream=True)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(next, iter(stream))
            assert held.wait(60)
            with pytest.raises(TimeoutError):
                first.result(timeout=1)
            release.set()
            assert first.result(timeout=60).choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        release.set()
        del engine.step


def test_chat_logprobs(client, references):
    response = client.chat.completions.create(model=LLAMA, messages=CHATS[0], max_tokens=3, temperature=0,
                                              logprobs=True, top_logprobs=2)
    content = response.choices[0].logprobs.content
    assert "".join(t.token for t in content) == response.choices[0].message.content
    assert response.choices[0].message.content == references.chats[0].outputs[0].text[:len(response.choices[0]
                                                                                               .message.content)]
    for token in content:  # greedy: the sampled token is the most likely one
        assert len(token.top_logprobs) == 2 and token.top_logprobs[0].token == token.token
        assert token.top_logprobs[0].logprob == pytest.approx(token.logprob)
        assert token.logprob >= token.top_logprobs[1].logprob


def test_bart_completions(client, references):
    greedy = dict(model=BART, max_tokens=BART_MAX_TOKENS, temperature=0)
    batch, explicit, stopped, *streams = run_all(
        lambda: client.completions.create(prompt=BART_PROMPTS, **greedy),
        lambda: client.completions.create(prompt=BART_EXPLICIT[0], extra_body={"decoder_prompt": BART_EXPLICIT[1]},
                                          **greedy),
        lambda: streamed_completion(client, prompt=BART_PROMPTS[0], stop=references.bart_stop, **greedy),
        *(lambda p=p: streamed_completion(client, prompt=p, **greedy) for p in BART_PROMPTS))
    expected = [o.outputs[0].text for o in references.bart]
    assert [c.text for c in batch.choices] == expected
    assert [text for text, _ in streams] == expected
    assert batch.usage.prompt_tokens == sum(len(o.prompt_token_ids) + len(o.encoder_prompt_token_ids)
                                            for o in references.bart)
    assert explicit.choices[0].text == references.bart_explicit.outputs[0].text
    text, chunks = stopped
    assert text == references.bart_stopped.outputs[0].text
    final = [c.choices[0] for c in chunks if c.choices][-1]
    assert final.finish_reason == "stop" and final.model_extra["stop_reason"] == references.bart_stop


def test_bart_seeded_sampling_and_logprobs(client, references):
    n, top_k, seed, temperature = SAMPLED["n"], SAMPLED["top_k"], SAMPLED["seed"], SAMPLED["temperature"]
    sampled = client.completions.create(model=BART, prompt=BART_PROMPTS[1], max_tokens=BART_MAX_TOKENS, n=n,
                                        temperature=temperature, seed=seed, extra_body={"top_k": top_k}, logprobs=2)
    assert [c.text for c in sampled.choices] == [o.text for o in references.bart_sampled.outputs]
    assert [c.index for c in sampled.choices] == list(range(n))
    for choice, expected in zip(sampled.choices, references.bart_sampled.outputs):
        logprobs = choice.logprobs
        assert "".join(logprobs.tokens) == choice.text
        assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(len(logprobs.tokens))]
        assert sum(logprobs.token_logprobs) == pytest.approx(expected.cumulative_logprob, abs=1e-4)
        for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
            assert top[token] == logprob and 2 <= len(top) <= 3  # the two most likely, and the sampled one


def test_transcriptions(client, references):
    wav0, wav1 = references.wavs
    expected = [o.outputs[0].text.strip() for o in references.speech]
    assert all(expected)

    def transcribe(wav, **kwargs):
        return client.audio.transcriptions.create(model=WHISPER, file=("speech.wav", wav, "audio/wav"), **kwargs)

    def stream(wav):
        return list(transcribe(wav, stream=True))

    json0, json1, stream0, stream1, verbose, srt, vtt = run_all(
        lambda: transcribe(wav0), lambda: transcribe(wav1, language="en"), lambda: stream(wav0), lambda: stream(wav1),
        lambda: transcribe(wav1, response_format="verbose_json"), lambda: transcribe(wav1, response_format="srt"),
        lambda: transcribe(wav1, response_format="vtt"))
    assert [json0.text, json1.text] == expected
    for events, text in zip((stream0, stream1), expected):
        assert "".join(e.delta for e in events if e.type == "transcript.text.delta") == text
        assert events[-1].type == "transcript.text.done" and events[-1].text == text
    # Segments decode with timestamp tokens (tests/speech/test_long_form.py checks their times against HF's).
    assert verbose.language == "english" and verbose.task == "transcribe" and verbose.segments
    assert verbose.text == "".join(s.text for s in verbose.segments).strip()
    timestamp_begin = references.speech[1].prompt_token_ids[-1] + 1  # after <|notimestamps|>
    for segment in verbose.segments:
        assert segment.tokens[0] >= timestamp_begin and segment.tokens[-1] >= timestamp_begin
        assert 0 <= segment.start <= segment.end <= verbose.duration + 1e-6 and segment.avg_logprob < 0
        assert 0 <= segment.no_speech_prob <= 1
    cues = [(s.start, s.end, s.text.strip()) for s in verbose.segments]
    assert srt == "".join(f"{i}\n{_clock(a, ',')} --> {_clock(b, ',')}\n{t}\n\n" for i, (a, b, t) in enumerate(cues, 1))
    assert vtt == "WEBVTT\n\n" + "".join(f"{_clock(a, '.')} --> {_clock(b, '.')}\n{t}\n\n" for a, b, t in cues)


def test_transcription_prompt_conditions_as_the_engine_does(client, references):
    """The OpenAI ``prompt`` (earlier text) goes after ``<|startofprev|>``, before the decoder prompt."""
    out = client.audio.transcriptions.create(model=WHISPER, file=("speech.wav", references.wavs[0], "audio/wav"),
                                             prompt=SPEECH_CONTEXT)
    assert out.text == references.speech_prompted.outputs[0].text.strip()
    assert references.speech_prompted.prompt_token_ids[0] != references.speech[0].prompt_token_ids[0]


def _clock(seconds: float, marker: str) -> str:
    millis = round(seconds * 1000)
    return f"00:00:{millis // 1000:02d}{marker}{millis % 1000:03d}"


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's note on translations
def test_translation_with_an_english_only_model_is_refused(client, references):
    with pytest.raises(openai.BadRequestError, match="English-only"):
        client.audio.translations.create(model=WHISPER, file=("speech.wav", references.wavs[0], "audio/wav"))
