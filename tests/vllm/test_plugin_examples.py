"""The vendored TT vLLM plugin's own examples against tt-models' Llama class on the host backend (SmolLM2, or a tiny
random Llama with SmolLM2's tokenizer and context where the answers' words do not matter), run as a TT
engineer runs them (``TT_MODELS_BACKEND=host``, ``MESH_DEVICE=N150``; ``run_tt_example.py`` only aliases the
``vllm.inputs.data`` module the offline example imports from an older vLLM layout):

- ``offline_inference_tt.py`` answers its prompts, and ``--test_increasing_seq_lens`` completes the prompts that
  fit ``--max_model_len`` and ends, at the first that does not, in vLLM's length error (not a model error);
- ``server_example_tt.py`` (vLLM's OpenAI server) answers chat and streamed completions with the greedy tokens
  ``tt-models serve`` gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from tt_models.testing.chat_checkpoints import write_smollm2_checkpoint, write_tiny_chat_checkpoint
from tt_models.testing.server_process import free_port, wait_healthy

# Each test runs TT's example against a vLLM engine of its own (the server example beside `tt-models serve`): the
# extended group.
pytestmark = pytest.mark.heavy
ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_tt_example.py")
PLUGIN_SOURCE = Path(os.environ.get("TT_VLLM_PLUGIN_SOURCE",
                                    ROOT.parent / "shared" / "vendor" / "vllm-tt-plugin-b95c050.tar.gz"))
CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def extract_examples(out: Path) -> Path:
    """The plugin's ``examples/`` directory from the vendored source, extracted under ``out``."""
    with tarfile.open(PLUGIN_SOURCE) as tar:
        members = [m for m in tar.getmembers() if "/examples/" in m.name]
        tar.extractall(out, members=members, filter="data")
    return next(out.glob("*/examples"))


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory) -> Path:
    return write_smollm2_checkpoint(tmp_path_factory.mktemp("smollm2"))


@pytest.fixture(scope="module")
def tiny_chat_dir(tmp_path_factory) -> Path:
    """Where only the prompts and lengths matter (the offline example's runs): SmolLM2's tokenizer and context on a
    tiny random Llama."""
    return write_tiny_chat_checkpoint(tmp_path_factory.mktemp("tiny-chat"))


def _environ() -> dict[str, str]:
    drop = ("PYTHONPATH", "VLLM_PLUGINS", "TT_VISIBLE_DEVICES", "TT_METAL_MOCK_CLUSTER_DESC_PATH")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TT_MODELS_BACKEND": "host",
            "MESH_DEVICE": "N150"}


def _example(examples: Path, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), str(examples / name), *args], cwd=cwd, env=_environ(),
                          capture_output=True, text=True, timeout=900)


def test_offline_example_answers_its_prompts(examples: Path, tiny_chat_dir: Path, tmp_path: Path) -> None:
    """Every default prompt (chat-templated, at most 78 tokens) answered; one token each (the prefill's) is enough
    to answer them all, so no decode step is spent."""
    done = _example(examples, "offline_inference_tt.py", "--model", str(tiny_chat_dir), "--greedy_sampling",
                    "--max_tokens", "1", "--num_repeat_prompts", "1", "--max_model_len", "128", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-6000:]
    answers = [line for line in done.stdout.splitlines() if line.startswith("Prompt #")]
    prompts = len(__import__("json").loads((examples / "prompts.json").read_text()))
    assert len(answers) == prompts, done.stdout[-3000:]
    print("\n".join(answers[:5]))
    assert "Traceback" not in done.stderr


def test_increasing_seq_lens_end_in_vllms_length_error(examples: Path, tiny_chat_dir: Path, tmp_path: Path) -> None:
    """At SmolLM2's whole context (8192): counting to 10 and to 100 (60 and 331 tokens) fit, counting to 2000 (8932
    tokens) does not. The prompts run one at a time (4 users: the KV pool is sized for every user at full length)."""
    done = _example(examples, "offline_inference_tt.py", "--model", str(tiny_chat_dir), "--test_increasing_seq_lens",
                    "--greedy_sampling", "--max_tokens", "2", "--max_model_len", "8192", "--max_seqs_in_batch", "4",
                    cwd=tmp_path)
    answers = [line for line in done.stdout.splitlines() if line.startswith("Prompt #")]
    assert len(answers) == 2, done.stdout[-3000:] + done.stderr[-6000:]  # counting to 10 and to 100 fit
    error = "VLLMValidationError: This model's maximum context length is 8192 tokens"
    assert done.returncode != 0 and error in done.stderr, done.stderr[-3000:]
    assert "tt_models" not in done.stderr.split("Traceback")[-1], "the length error comes from vLLM, not the model"


@contextmanager
def running_servers(*servers: tuple[list[str], Path, Path], env: dict[str, str] | None = None,
                    meanwhile: Callable[[], object] | None = None) -> Iterator[list[str]]:
    """Starts every ``(command, cwd, log)`` server at once (their startups overlap; ``env`` added to the example
    environment), calls ``meanwhile`` while they start, yields their URLs when all are healthy, stops them all."""
    processes, urls = [], []
    try:
        for command, cwd, log in servers:
            port = free_port()
            with open(log, "w") as out:
                processes.append(subprocess.Popen([*command, "--port", str(port)], stdout=out,
                                                  stderr=subprocess.STDOUT, cwd=cwd,
                                                  env={**_environ(), **(env or {})}))
            urls.append(f"http://127.0.0.1:{port}")
        if meanwhile is not None:
            meanwhile()
        deadline = time.monotonic() + 300
        for process, url, (_, _, log) in zip(processes, urls, servers):
            wait_healthy(url, process, log, seconds=deadline - time.monotonic())
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _answers(url: str) -> dict[str, str]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(model=model, messages=CHAT, max_tokens=8, temperature=0)
    stream = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0,
                                       stream=True)
    return {"chat": chat.choices[0].message.content,
            "stream": "".join(chunk.choices[0].text for chunk in stream if chunk.choices)}


def test_server_example_answers_as_tt_models_serve(examples: Path, smollm2_dir: Path, tmp_path: Path) -> None:
    """Both servers start side by side (their startups overlap), then each answers the same chat and streamed
    completion."""
    vllm_server = [sys.executable, str(RUNNER), str(examples / "server_example_tt.py"), "--model", str(smollm2_dir),
                   "--max_num_seqs", "4", "--max_model_len", "256"]
    ours_command = [sys.executable, "-m", "tt_models.server.cli", "serve", str(smollm2_dir), "--max-num-seqs", "4",
                    "--block-size", "64", "--max-model-len", "256", "--backend", "host"]
    with running_servers((vllm_server, tmp_path, tmp_path / "vllm.log"),
                         (ours_command, ROOT, tmp_path / "ours.log")) as urls:
        theirs, ours = (_answers(url) for url in urls)
    print(theirs)
    assert "Paris" in theirs["chat"]
    assert theirs == ours
