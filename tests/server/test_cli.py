"""The server as a user starts it (``demo/server_example_tt.py`` -> ``tt-models serve``) in its own process: a full
waiting queue answers 503, and closing the streams that filled it frees everything; its mesh options."""

from __future__ import annotations

import importlib.metadata
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from tt_models.engine.sampling import SamplingParams
from tt_models.server import cli
from tt_models.testing.metrics import metric
from tt_models.testing.server_process import free_port, stop, wait_healthy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NAME = "bart-cli"


@pytest.fixture(scope="module")
def small_server(bart_dir, tmp_path_factory):
    """One sequence at a time and one waiting request at most."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [sys.executable, str(ROOT / "demo" / "server_example_tt.py"), "--model", str(bart_dir),
               "--max_seqs_in_batch", "1", "--served-model-name", NAME, "--max-num-waiting", "1",
               "--max-model-len", "1024", "--backend", "host", "--optimizations", "accuracy", "--port", str(port),
               "--log-level", "warning"]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log, seconds=180)
        yield url
    finally:
        stop(process, 60)
    # A graceful shutdown (uvicorn then re-raises the SIGTERM that stopped it): no error, no kill.
    assert process.returncode in (0, -signal.SIGTERM) and "Traceback" not in log.read_text(), log.read_text()


def _metrics(url: str, name: str) -> float:
    """vLLM's name for what vLLM also measures (``vllm:num_requests_running``), tt-models' for the rest."""
    return metric(httpx.get(f"{url}/metrics").text, name, model_name=NAME)


def test_full_queue_is_503_and_closed_streams_free_their_blocks(small_server):
    client = openai.OpenAI(base_url=f"{small_server}/v1", api_key="unused", max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == [NAME]
    long = dict(model=NAME, prompt="Hello world", max_tokens=1000, temperature=0, stream=True,
                extra_body={"ignore_eos": True})
    running = client.completions.create(**long)
    next(iter(running))  # it has a token: it holds the one batch slot
    waiting = client.completions.create(**long)  # accepted (the stream began): it waits for the slot
    assert (_metrics(small_server, "vllm:num_requests_running"), _metrics(small_server, "vllm:num_requests_waiting")) == (1, 1)
    assert _metrics(small_server, "tt_models:kv_blocks_in_use") > 0

    with pytest.raises(openai.APIStatusError) as full:
        client.completions.create(model=NAME, prompt="Hi", max_tokens=4)
    assert full.value.status_code == 503
    assert "waiting queue is full (1 requests)" in full.value.body["message"]

    running.close()
    waiting.close()
    deadline = time.monotonic() + 30
    while any(_metrics(small_server, n) for n in ("tt_models:kv_blocks_in_use", "vllm:num_requests_running",
                                                   "vllm:num_requests_waiting")):
        assert time.monotonic() < deadline, httpx.get(f"{small_server}/metrics").text
        time.sleep(0.2)
    assert metric(httpx.get(f"{small_server}/metrics").text, "vllm:request_success_total", model_name=NAME,
                  finished_reason="abort") == 2

    served = client.completions.create(model=NAME, prompt="Hello world", max_tokens=6, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert served.choices[0].finish_reason == "length" and served.usage.completion_tokens == 6
    assert served.choices[0].text


def test_a_client_that_gives_up_on_a_plain_request_aborts_it(small_server):
    aborted_before = metric(httpx.get(f"{small_server}/metrics").text, "vllm:request_success_total", 0.0,
                            model_name=NAME, finished_reason="abort")
    body = {"model": NAME, "prompt": "Hello world", "max_tokens": 1000, "temperature": 0, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):  # 1000 steps take seconds: the client leaves first
        httpx.post(f"{small_server}/v1/completions", json=body, timeout=1.5)
    deadline = time.monotonic() + 30
    while metric(text := httpx.get(f"{small_server}/metrics").text, "vllm:request_success_total", 0.0,
                 model_name=NAME, finished_reason="abort") == aborted_before:
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    assert _metrics(small_server, "tt_models:kv_blocks_in_use") == 0 and _metrics(small_server, "vllm:num_requests_running") == 0


def test_console_script_runs_the_cli():
    [entry] = importlib.metadata.entry_points(group="console_scripts", name="tt-models")
    assert entry.load() is cli.main


def test_mesh_shape_and_data_parallel_size_make_tensor_parallel_replicas(tmp_path):
    """``tt-models serve MODEL --mesh-shape 1x8 --data-parallel-size 2``: two replicas, each tensor-parallel over 4
    chips of the host mesh, with per-chip KV heads; a request is served; a shape that is not RxC is refused."""
    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=1, num_attention_heads=8,
                         num_key_value_heads=8, head_dim=32, vocab_size=320, max_position_embeddings=256)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    args = cli._parser().parse_args(["serve", str(tmp_path), "--mesh-shape", "1x8", "--data-parallel-size", "2",
                                     "--backend", "host", "--max-num-seqs", "4", "--max-model-len", "128"])
    (engine,) = cli.build_engines(args).values()
    try:
        assert [d.get_num_devices() for d in engine.runner.model.devices] == [4, 4]
        assert engine.runner.model.models[0].kv_geometry[0] == 2  # 8 KV heads over 4 chips
        engine.add_request("r", {"prompt_token_ids": [5, 6, 7]}, SamplingParams(max_tokens=3, ignore_eos=True))
        outputs = []
        while engine.has_unfinished_requests():
            outputs += [o for o in engine.step() if o.finished]
        assert len(outputs[0].outputs[0].token_ids) == 3
    finally:
        engine.close()
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["serve", str(tmp_path), "--mesh-shape", "1x"])
