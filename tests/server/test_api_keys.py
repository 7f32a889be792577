"""API keys (``tt-models serve --api-key``): without a key, with a wrong one or another deployment's, every ``/v1``
route answers 401 in OpenAI's error shape; with a key the outputs are the open server's; ``/health`` and
``/metrics`` stay open. A real uvicorn server on a tiny random Llama, the official openai client."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.engine.test_structured_output import write_tiny_llama
from tests.server.cases import ServerThread
from tt_models.disagg.proxy import Proxy
from tt_models.engine.config import EngineConfig
from tt_models.engine.llm_engine import LLMEngine
from tt_models.server import create_app
from tt_models.server.auth import API_KEY_ENV, BearerAuth, api_keys

MODEL, KEYS = "tiny", ["key-one", "key-two"]
ROUTES = [("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
          ("POST", "/v1/audio/transcriptions"), ("POST", "/v1/audio/translations")]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = LLMEngine.from_model(write_tiny_llama(tmp_path_factory.mktemp("tiny-llama")),
                                  EngineConfig(max_num_seqs=4, block_size=32, max_model_len=128), backend="host",
                                  optimizations="accuracy")
    yield engine
    engine.close()


def complete(url: str, key: str) -> list[int]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)
    reply = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0,
                                      logprobs=1)
    return reply.choices[0].logprobs.tokens


def test_every_v1_route_needs_a_key_and_outputs_are_the_open_servers(engine):
    with ServerThread(create_app({MODEL: engine})) as server:
        expected = complete(server.url, "unused")
    app = create_app({MODEL: engine})
    app.add_middleware(BearerAuth, keys=KEYS)
    with ServerThread(app) as server:
        # A prefix of a key ("key" of "key-one") is no key, nor is an empty token ("Bearer " arrives as "Bearer":
        # HTTP strips the trailing space, and h11 will not send it).
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer key-one-of-another"},
                        {"Authorization": "Bearer key"}, {"Authorization": "Bearer"},
                        {"Authorization": "Basic key-one"}, {"Authorization": "key-one"}):
            for method, route in ROUTES:
                reply = httpx.request(method, server.url + route, headers=headers, json={}, timeout=30)
                assert reply.status_code == 401, (headers, route)
                assert reply.json()["error"]["code"] == "invalid_api_key" and reply.json()["error"]["type"] == \
                    "invalid_request_error"
        with pytest.raises(openai.AuthenticationError):
            complete(server.url, "wrong")
        assert complete(server.url, "key-one") == complete(server.url, "key-two") == expected
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert "tt_models:kv_blocks_in_use" in httpx.get(f"{server.url}/metrics").text


def test_keys_come_from_the_flags_or_the_environment(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert api_keys(None) == []
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert api_keys(None) == ["from-env"] and api_keys(["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match="must not be empty"):
        api_keys([" "])


def test_the_proxy_sends_its_upstream_key_not_the_clients():
    proxy = Proxy(["http://127.0.0.1:1"], ["http://127.0.0.1:2"], upstream_api_key="upstream")
    assert proxy.client.headers["authorization"] == "Bearer upstream"
    assert "authorization" not in Proxy(["http://127.0.0.1:1"], ["http://127.0.0.1:2"]).client.headers
