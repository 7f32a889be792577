"""tt-models' OpenAI server against vLLM's, both loaded by vLLM's own client (``vllm bench serve``).

The same checkpoint, the same tt-models model class on the host backend, behind two servers: ``tt-models serve``,
and ``vllm serve`` with the real TT vLLM plugin (``TT_MODELS_BACKEND=host MESH_DEVICE=N150``). Both are sized alike
(32 sequences, 64-token blocks, 2048-token context) and run one after the other, never at once. For each model
(``tiny``: a 2-layer random Llama with SmolLM2's tokenizer; ``smollm2``: SmolLM2-135M-Instruct), API (chat,
completions), input/output length and concurrency C, ``vllm bench serve`` sends ``rounds * C`` random prompts of
that many tokens (chat: plus the template's 30), generating exactly that many (``--ignore-eos``), and saves its JSON,
which this script reads. Each server keeps its own defaults: both cache prefixes; vLLM under the plugin schedules
asynchronously and prefills unchunked; tt-models chunks prefills (``--tt-models-args`` adds flags). The loads of a
server run one after the other with the same seed, so a load's first prompts are the previous load's, which both
servers find in their prefix caches (as the client's test request before each load). It prints, per row, output
tokens/s and TTFT/ITL p50/p99 of each server and the ratio tt-models / vLLM (tokens/s: > 1 is tt-models faster;
latencies: < 1 is), and at concurrency 32 each server's throughput over its own offline engine's (tt-models'
``LLM``, vLLM's ``LLM`` with the plugin, each in a fresh process, the same requests, ``generate`` alone timed). Every
number goes to ``<workdir>/run-<time>/results.json``, the servers' and clients' logs beside it. The client shares the
machine's cores with the server (the figures are for both servers under the same client). The exit status is 1 if a
request failed.

    .venv/bin/python bench/serve_vs_vllm.py                    # the whole matrix: about an hour on 2 cores
    .venv/bin/python bench/serve_vs_vllm.py --models tiny --apis chat --lengths 128/128 --concurrency 1,8 --rounds 2
    .venv/bin/python bench/serve_vs_vllm.py --tt-models-args="--async-decode"   # flags of tt-models serve

Against tt-models serve alone, it then checks concurrency 64 (twice its sequences) with 32 streams closed mid-way by
a second client: no failed request, and every KV block free and nothing running after (``--no-cancellations`` skips
it).

``--second-client AIPERF`` also loads both servers with NVIDIA's aiperf (chat, 128/128, concurrency 8) to show the
figures do not hang on one client. aiperf needs numpy 2 (and another transformers), so it lives in a venv of its
own: ``python3.12 -m venv /tmp/aiperf && /tmp/aiperf/bin/pip install aiperf``, then
``--second-client /tmp/aiperf/bin/aiperf``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from serve_cancellations import cancellations_under_load
from serve_vs_vllm_clients import SECOND_CLIENT_LOAD, Load, aiperf, run_offline, running_server, vllm_bench_serve
from tt_models.testing.chat_checkpoints import write_smollm2_checkpoint, write_tiny_chat_checkpoint

MODELS = {"tiny": write_tiny_chat_checkpoint, "smollm2": write_smollm2_checkpoint}
SERVERS = ("tt-models", "vllm")
SIZING = ["--max-num-seqs", "32", "--block-size", "64", "--max-model-len", "2048"]
# What this checkout's tests set up for themselves is dropped, as tests/vllm/test_plugin_examples.py does: the run is a
# TT engineer's. The plugin reads PLUGIN_ENV when it opens the device.
DROPPED = ("PYTHONPATH", "VLLM_PLUGINS", "TT_VISIBLE_DEVICES", "TT_METAL_MOCK_CLUSTER_DESC_PATH")
PLUGIN_ENV = {"TT_MODELS_BACKEND": "host", "MESH_DEVICE": "N150"}


def environ() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in DROPPED}, **PLUGIN_ENV}


def server_command(server: str, directory: Path, name: str, extra: list[str]) -> list[str]:
    if server == "tt-models":
        return [sys.executable, "-m", "tt_models.server.cli", "serve", str(directory), "--served-model-name", name,
                *SIZING, "--backend", "host", *extra]
    return [str(Path(sys.executable).with_name("vllm")), "serve", str(directory), "--served-model-name", name, *SIZING,
            "--host", "127.0.0.1"]


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    versions = {name: importlib.metadata.version(name) for name in ("vllm", "vllm-tt-plugin", "torch", "tt-models")}
    return {"cpu": cpu, "cores": os.cpu_count(), **versions,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def report(label: str, result: dict[str, Any], log: Path) -> None:
    """One load's throughput as it finishes; failed requests loudly."""
    failed = result.get("error") or (f"{result['failed']} requests failed" if result.get("failed") else "")
    print(f"  {label}: {result.get('output_throughput', 0):.1f} tok/s"
          + (f"  *** FAILED: {failed} (server log: {log})" if failed else ""), flush=True)


def serve_and_load(server: str, directory: Path, name: str, loads: list[Load], args: argparse.Namespace,
                   run: Path) -> dict[str, Any]:
    """One server started, warmed up, loaded with every configuration (and the second client), stopped."""
    extra = shlex.split(args.tt_models_args) if server == "tt-models" else []
    found: dict[str, Any] = {"loads": {}, "second_client": None}
    log = run / f"{name}-{server}.log"
    print(f"{name}: starting {server} (log: {log})", flush=True)
    with running_server(server_command(server, directory, name, extra), log, run, environ()) as url:
        # Not recorded: a server's first requests pay one-time costs (seconds on tt-models' host backend).
        vllm_bench_serve(url, name, directory, Load(loads[0].api, max(lo.input_len for lo in loads), 8, 2),
                         run / f"{name}-{server}-warmup", prompts=2, env=environ())
        for load in loads:
            found["loads"][load.key] = vllm_bench_serve(url, name, directory, load, run / f"{name}-{server}-{load.key}",
                                                        prompts=args.rounds * load.concurrency, env=environ())
            report(load.key, found["loads"][load.key], log)
        if server == "tt-models" and not args.no_cancellations:
            found["cancellations"] = cancellations_under_load(url, name, directory, run / f"{name}-cancellations",
                                                              environ())
            result = found["cancellations"]
            print(f"  concurrency 64 with {result['cancelled']} streams closed mid-way: {result.get('failed')} failed, "
                  f"{result.get('completed')} completed; idle (no KV block, nothing running) "
                  + (f"{result['idle_after_s']:.1f} s after" if "idle_after_s" in result else "NOT reached"), flush=True)
            report("cancellations", result, log)
        if args.second_client:
            found["second_client"] = aiperf(args.second_client, url, name, directory, SECOND_CLIENT_LOAD,
                                            run / f"{name}-{server}-aiperf", args.rounds)
            report(f"aiperf {SECOND_CLIENT_LOAD.key}", found["second_client"], log)
    return found


def offline(directory: Path, lengths: list[tuple[int, int]], rounds: int, run: Path) -> dict[str, Any]:
    found: dict[str, Any] = {server: {} for server in SERVERS}
    for server in SERVERS:
        for input_len, output_len in lengths:
            key = f"{input_len}x{output_len}"
            print(f"  offline {server} {key}", flush=True)
            found[server][key] = run_offline(server, directory, 32 * rounds, input_len, output_len,
                                             run / f"offline-{directory.name}-{server}-{key}.log", environ())
    return found


def ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:5.2f}" if ours and theirs else "    -"


def cell(ours: float | None, theirs: float | None) -> str:
    show = lambda v: f"{v:8.1f}" if v is not None else "       -"  # noqa: E731
    return f"{show(ours)} {show(theirs)} {ratio(ours, theirs)}"


METRICS = [("output tok/s", "output_throughput"), ("TTFT p50 ms", "p50_ttft_ms"), ("TTFT p99 ms", "p99_ttft_ms"),
           ("ITL p50 ms", "p50_itl_ms"), ("ITL p99 ms", "p99_itl_ms")]


def print_table(results: dict[str, Any], loads: list[Load]) -> None:
    """A row per model and load: each metric as tt-models, vLLM, tt-models / vLLM; at C=32, served / offline."""
    print("\n" + " " * 34 + "".join(f"| {title:<24}" for title, _ in METRICS) + "| served/offline")
    print(f"{'model':<8}{'api':<12}{'in/out':<10}{'C':>3} "
          + "| tt-models     vLLM ratio " * len(METRICS) + "| tt-models      vLLM")
    for name, by_server in results.items():
        for load in loads:
            ours, theirs = (by_server[s]["loads"].get(load.key, {}) for s in SERVERS)
            row = f"{name:<8}{load.api:<12}{load.input_len}/{load.output_len:<6}{load.concurrency:>3} "
            row += "".join(f"| {cell(ours.get(key), theirs.get(key))} " for _, key in METRICS)
            if load.concurrency == 32:
                served = [by_server[s]["loads"].get(load.key, {}).get("output_throughput") for s in SERVERS]
                offline_tps = [by_server["offline"][s][f"{load.input_len}x{load.output_len}"]["output_throughput"]
                               for s in SERVERS]
                row += "| " + " ".join(f"{ratio(a, b):>9}" for a, b in zip(served, offline_tps))
            print(row)


def print_peers(results: dict[str, Any]) -> None:
    """Per model: the offline engines' tokens/s, and aiperf's figures beside ``vllm bench serve``'s."""
    for name, by_server in results.items():
        for length, ours in by_server["offline"]["tt-models"].items():
            tps = ours["output_throughput"], by_server["offline"]["vllm"][length]["output_throughput"]
            print(f"{name} offline {length}, 32 x rounds prompts: tt-models {tps[0]:.1f} tok/s, "
                  f"vLLM {tps[1]:.1f} tok/s, ratio {ratio(*tps).strip()}")
        clients = [by_server[s]["second_client"] for s in SERVERS]
        if all(clients):
            bench = [by_server[s]["loads"].get(SECOND_CLIENT_LOAD.key, {}) for s in SERVERS]
            print(f"{name} {SECOND_CLIENT_LOAD.key}, tt-models / vLLM by aiperf and by vllm bench serve:")
            for title, key in [*METRICS, ("TPOT p50 ms", "p50_tpot_ms")]:
                print(f"  {title:<13} aiperf {cell(*(c.get(key) for c in clients))}   vllm bench "
                      f"{cell(*(b.get(key) for b in bench))}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2")
    parser.add_argument("--apis", default="chat,completions", help="comma-separated: chat, completions")
    parser.add_argument("--lengths", default="128/128,1024/128", help="comma-separated input/output token counts")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="requests per load = rounds x concurrency")
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "tt-models" / "bench",
                        help="checkpoints (written once), and a run-<time> directory of logs and results per run")
    parser.add_argument("--tt-models-args", default="",
                        help='extra flags of tt-models serve, after an "=": --tt-models-args="--async-decode"')
    parser.add_argument("--second-client", metavar="AIPERF", help="the aiperf script (in a venv of its own)")
    parser.add_argument("--no-cancellations", action="store_true",
                        help="skip the check of tt-models serve at concurrency 64 with streams closed mid-way")
    args = parser.parse_args()
    args.models = args.models.split(",")
    if unknown := set(args.models) - set(MODELS):
        parser.error(f"unknown models {sorted(unknown)}")
    args.lengths = [tuple(int(n) for n in pair.split("/")) for pair in args.lengths.split(",")]
    args.loads = [Load(api, i, o, int(c)) for api in args.apis.split(",") for i, o in args.lengths
                  for c in args.concurrency.split(",")]
    return args


def main() -> int:
    args = parse_args()
    about = machine()
    print(f"{about['cpu']}, {about['cores']} cores; vLLM {about['vllm']}, vllm-tt-plugin {about['vllm-tt-plugin']}, "
          f"torch {about['torch']}, tt-models {about['tt-models']}; {about['date']}", flush=True)
    run = args.workdir / f"run-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    run.mkdir(parents=True)
    results: dict[str, Any] = {}
    for name in args.models:
        directory = MODELS[name](args.workdir / "checkpoints")
        results[name] = {server: serve_and_load(server, directory, name, args.loads, args, run) for server in SERVERS}
        results[name]["offline"] = offline(directory, args.lengths, args.rounds, run)
        # After each model: an hour's run that fails later keeps what it measured.
        (run / "results.json").write_text(json.dumps({"machine": about, "args": sys.argv[1:], "results": results},
                                                     indent=1))
    print_table(results, args.loads)
    print_peers(results)
    print(f"\nall numbers: {run / 'results.json'}")
    failures = [f"{name} {server} {key}" for name, by_server in results.items() for server in SERVERS
                for key, result in [*by_server[server]["loads"].items(), ("aiperf", by_server[server]["second_client"]),
                                    ("cancellations", by_server[server].get("cancellations"))]
                if result and (result.get("failed") or result.get("error"))]
    if failures:
        print("FAILED REQUESTS in: " + ", ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
