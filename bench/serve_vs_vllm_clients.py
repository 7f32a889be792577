"""The processes bench/serve_vs_vllm.py runs: a server until a block ends, vLLM's load client (``vllm bench serve``)
and aiperf against it, the offline peer; each result read from the JSON the process saves or prints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tt_models.testing.server_process import free_port, stop, wait_healthy

VLLM = str(Path(sys.executable).with_name("vllm"))
OFFLINE = Path(__file__).with_name("serve_vs_vllm_offline.py")
APIS = {"chat": ("openai-chat", "/v1/chat/completions"), "completions": ("openai", "/v1/completions")}
STARTUP_S = 900  # vLLM takes 1-2 minutes to start here, SmolLM2 under load more


@dataclass(frozen=True)
class Load:
    api: str  # a key of APIS
    input_len: int
    output_len: int
    concurrency: int

    @property
    def key(self) -> str:
        return f"{self.api}-{self.input_len}x{self.output_len}-c{self.concurrency}"


SECOND_CLIENT_LOAD = Load("chat", 128, 128, 8)


@contextmanager
def running_server(command: list[str], log: Path, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """``command --port P`` until the block ends; yields its URL once healthy. A session of its own, so that the
    stop reaches vLLM's engine-core process too if the server does not end it."""
    port = free_port()
    with open(log, "w") as out:
        process = subprocess.Popen([*command, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                   env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, log, seconds=STARTUP_S)
        yield url
    finally:
        stop(process, 120)
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what it left behind (its group is its own)
        except ProcessLookupError:
            pass


def vllm_bench_serve(url: str, name: str, directory: Path, load: Load, out: Path, *, prompts: int,
                     env: dict[str, str]) -> dict[str, Any]:
    """``vllm bench serve`` of ``load`` (``prompts`` requests) against ``url``; the JSON it saved under ``out``
    (its own output in ``out.log``), or ``{"error": ...}`` if it failed."""
    backend, endpoint = APIS[load.api]
    command = [VLLM, "bench", "serve", "--base-url", url, "--backend", backend, "--endpoint", endpoint, "--model",
               name, "--tokenizer", str(directory), "--dataset-name", "random", "--random-input-len",
               str(load.input_len), "--random-output-len", str(load.output_len), "--ignore-eos", "--max-concurrency",
               str(load.concurrency), "--num-prompts", str(prompts), "--disable-tqdm", "--percentile-metrics",
               "ttft,tpot,itl", "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
               "--result-filename", "result.json", "--seed", "0"]
    out.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".log"), "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=out, env=env)
    if done.returncode != 0 or not (out / "result.json").exists():
        return {"error": f"vllm bench serve exited with {done.returncode}: {out.with_suffix('.log')}"}
    return json.loads((out / "result.json").read_text())


def aiperf(script: str, url: str, name: str, directory: Path, load: Load, out: Path, rounds: int) -> dict[str, Any]:
    """aiperf's streamed ``load`` against ``url`` (``rounds * C`` requests) in ``vllm bench serve``'s key names
    (``output_throughput``, ``p50_ttft_ms``, ..., ``failed``), read from the ``profile_export_aiperf.json`` it saves
    under ``out``. Tokens are counted as the server reports them, as ``vllm bench serve`` does (aiperf would otherwise
    count its own tokenization of the text); it scrapes no metrics, as ``vllm bench serve`` does not."""
    command = [script, "profile", "--model", name, "--url", url, "--endpoint-type", load.api, "--streaming",
               "--tokenizer", str(directory), "--isl", str(load.input_len), "--isl-stddev", "0", "--osl",
               str(load.output_len), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
               "--use-server-token-count", "--no-server-metrics", "--concurrency", str(load.concurrency),
               "--request-count", str(rounds * load.concurrency), "--random-seed", "0", "--artifact-dir", str(out),
               "--ui", "none"]
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # its own venv's packages, not the checkout
    with open(out.with_suffix(".log"), "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=out, env=env)
    exported = out / "profile_export_aiperf.json"
    if done.returncode != 0 or not exported.exists():
        return {"error": f"aiperf exited with {done.returncode}: {out.with_suffix('.log')}"}
    metrics = json.loads(exported.read_text())
    found = {"output_throughput": metrics["output_token_throughput"]["avg"],
             "failed": sum(error["count"] for error in metrics["error_summary"])}
    # vLLM's ITL is the gap between streamed chunks, aiperf's inter_chunk_latency; aiperf's inter_token_latency is
    # per request (end - first token) / (tokens - 1), vLLM's TPOT.
    for key, metric in (("ttft", "time_to_first_token"), ("itl", "inter_chunk_latency"),
                        ("tpot", "inter_token_latency")):
        for p in (50, 99):
            found[f"p{p}_{key}_ms"] = metrics[metric][f"p{p}"]
    return found


def run_offline(peer: str, directory: Path, prompts: int, input_len: int, output_len: int, log: Path,
                env: dict[str, str]) -> dict[str, Any]:
    """The offline peer in a fresh process (output in ``log``): its ``RESULT`` line."""
    arguments = {"peer": peer, "model": str(directory), "prompts": prompts, "input_len": input_len,
                 "output_len": output_len}
    with open(log, "w+") as out:
        done = subprocess.run([sys.executable, str(OFFLINE), json.dumps(arguments)], stdout=out,
                              stderr=subprocess.STDOUT, cwd=log.parent, env=env)
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the offline {peer} run failed (exit {done.returncode}): {log}")
    return json.loads(lines[-1].removeprefix("RESULT "))
