"""The real TT vLLM plugin (vllm-tt-plugin, vendored; scripts/setup.sh installs it) serving tt-models' Llama on a
machine with no card: only ``TT_MODELS_BACKEND=host`` and ``MESH_DEVICE`` set, greedy tokens equal to
``tt_models.LLM``'s, a clean exit.

The scenarios run in fresh processes (plugin_scenario.py, started outside the checkout): vLLM's platform, registry
and environment cache are process-global. A vLLM process costs 10-40 s of CPU to start, so there are two: one
whose engine cores are processes of their own (vLLM's default: N150, then N300), one whose engines run in it
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the in-process checks, T3K, the traced and sliding-window runs), each
serving its runs one after another; each test checks its runs' part of the report and log. The plugin's default
path with our class: no device sampling, no async decode (the class declares neither), prefix caching on, decode
padded to ``max_num_seqs``. The vendored commit has no switch for plugin main's decode as one-token prefill, so that
path is not run here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

from tests.vllm.plugin_scenario import RUN_MARKER
from tests.vllm.scenario_process import run_scenario
from tt_models import LLM, SamplingParams
from tt_models.models.gemma3.generator import Gemma3ForCausalLM
from tt_models.models.llama.generator import MistralForCausalLM
from tt_models.runtime import mock
from tt_models.testing.chat_checkpoints import write_smollm2_checkpoint
from tt_models.testing.gemma3 import tiny_gemma3_text
from tt_models.testing.llama import tiny_model
from tt_models.testing.moe import tiny_moe
from tt_models.vllm import ENCODER_DECODER_WORKER

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).with_name("plugin_scenario.py")
# Shorter and longer than a block, one crossing a block boundary while decoding; 3 rows in a 4-row decode batch.
PROMPTS = [[5, 17, 99, 3], list(range(10, 50)), [200, 7] * 14]
SIZES = dict(max_tokens=8, block_size=32, max_num_seqs=4, max_model_len=256)
HOST_DEVICE = "tt_models.runtime.host.device.MeshDevice"
# MESH_DEVICE -> the host mesh opened, as the plugin's _resolve_mesh_grid maps it.
MESHES = {"N150": [1, 1], "N300": [1, 2], "T3K": [1, 8], "(2, 4)": [2, 4]}


# vLLM's inspection of our registered classes and of its own of the same architectures (what ``inspect_model_cls``
# computes in a subprocess of its own), all of them in one process, saved where vLLM's registry looks for it first.
INSPECT = """
import importlib.util, pathlib, sys
from vllm import ModelRegistry
from vllm.model_executor.models.registry import _ModelInfo
from tt_models.vllm.registry import register_tt_models
register_tt_models()
for arch in sys.argv[1:]:
    model = ModelRegistry.models[arch]
    path = pathlib.Path(importlib.util.find_spec(model.module_name).origin)
    model._save_modelinfo_to_cache(_ModelInfo.from_model_cls(model.load_model_cls()),
                                   model._get_modelinfo_module_hash(path))
"""


def inspected(path: Path, names: list[str]) -> Path:
    """``path`` as a ``VLLM_CACHE_ROOT`` holding vLLM's inspection of each registered class of ``names`` (ours,
    ``TT<arch>``, and vLLM's own, ``<arch>``: its ModelConfig resolves the checkpoint's plain architecture first),
    made here in one process: vLLM runs one subprocess per class otherwise, 10-15 s each. None sees an inspection of
    another version of the classes."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_PLUGINS", mock.MOCK_ENV_VAR)}
    done = subprocess.run([sys.executable, "-c", INSPECT, *names], cwd=path,
                          env={**environ, "VLLM_CACHE_ROOT": str(path)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((path / "modelinfos").glob("*.json"))) == len(names), done.stderr[-3000:]
    return path


@pytest.fixture(scope="module")
def vllm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by this module's vLLM runs: ours and vLLM's Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE, GPT-OSS and Gemma 3
    text inspected."""
    archs = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Qwen3MoeForCausalLM",
             "GptOssForCausalLM", "Gemma3ForCausalLM")
    names = [f"{prefix}{arch}" for arch in archs for prefix in ("TT", "")]
    return inspected(tmp_path_factory.mktemp("vllm-cache"), names)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert importlib.util.find_spec("vllm_tt_plugin") is not None, (
        "vllm-tt-plugin is not installed: scripts/setup.sh installs it from $TT_VLLM_PLUGIN_SOURCE "
        "(default ../shared/vendor/vllm-tt-plugin-b95c050.tar.gz)")
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama-gqa").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> list[list[int]]:
    """``tt_models.LLM``'s greedy tokens: host backend, the default optimizations (the plugin passes
    ``additional_config.tt.optimizations``, None unless set, as ``tt_models.LLM`` does by default)."""
    llm = LLM(str(model_dir), backend="host", optimizations=None, max_num_seqs=SIZES["max_num_seqs"],
              block_size=SIZES["block_size"], max_model_len=SIZES["max_model_len"])
    params = SamplingParams(temperature=0.0, max_tokens=SIZES["max_tokens"], ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)]


def serve(model_dir: Path, workdir: Path, cache: Path, env: dict[str, str], timeout: int = 400,
          meanwhile: Callable[[], Any] | None = None, **args: Any) -> tuple[dict[str, Any], str, str]:
    """plugin_scenario.py in a fresh process: its report, stdout (vLLM's log) and stderr. ``meanwhile`` (e.g. the
    reference run) is called here while that process runs."""
    arguments = {"prompts": PROMPTS, **SIZES, **({} if "models" in args else {"model": str(model_dir)}), **args}
    return run_scenario(SCENARIO, arguments, workdir, {"TT_MODELS_BACKEND": "host", "VLLM_CACHE_ROOT": str(cache),
                                                       **env}, timeout=timeout, meanwhile=meanwhile)


def run_logs(stdout: str) -> list[str]:
    """The log of each run of a ``models`` scenario: its stdout split at the ``RUN_MARKER`` lines."""
    logs: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith(RUN_MARKER):
            logs.append([])
        elif logs:
            logs[-1].append(line)
    return ["\n".join(log) for log in logs]


def check_run(report: dict[str, Any], stdout: str, stderr: str, reference: list[list[int]], mesh: str,
              opens: int = 1) -> None:
    print(f"vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
    assert report["tokens"] == reference
    assert "Traceback" not in stderr, stderr[-6000:]
    opened = [line for line in stdout.splitlines() if "tt-models: TT_MODELS_BACKEND=host" in line]
    assert len(opened) == opens and f"host device as a {mesh} mesh" in opened[0], opened


ENGINE_CORE_MESHES = {"N150": "1x1", "N300": "1x2"}


@pytest.fixture(scope="module")
def engine_core_runs(model_dir: Path, vllm_cache: Path, tmp_path_factory: pytest.TempPathFactory,
                     request: pytest.FixtureRequest) -> dict[str, tuple[dict[str, Any], str, str]]:
    """One vLLM process serving the tiny Llama with each ``MESH_DEVICE`` of ``ENGINE_CORE_MESHES`` in turn (set
    before each engine, whose core process inherits it), each engine core a process of its own, shut down before
    the next starts: ``{MESH_DEVICE: (report, its log, the stderr)}``. The reference runs meanwhile."""
    runs = [{"model": str(model_dir), "env": {"MESH_DEVICE": value}} for value in ENGINE_CORE_MESHES]
    reports, stdout, stderr = serve(model_dir, tmp_path_factory.mktemp("engine-core"), vllm_cache, {}, models=runs,
                                    meanwhile=lambda: request.getfixturevalue("reference"))
    logs = run_logs(stdout)
    assert len(reports) == len(logs) == len(runs), stdout[-3000:]
    return {value: (report, log, stderr) for value, report, log in zip(ENGINE_CORE_MESHES, reports, logs)}


@pytest.mark.parametrize(("mesh_device", "mesh"), list(ENGINE_CORE_MESHES.items()))
def test_engine_core_process_opens_a_host_device(engine_core_runs: dict[str, tuple[dict[str, Any], str, str]],
                                                 reference: list[list[int]], mesh_device: str, mesh: str) -> None:
    """vLLM's default: the engine core (the plugin's worker) in a process of its own, where tt-models' general
    plugin patches the worker module when it is imported. On N300 the model is tensor-parallel over both chips,
    each holding ``kv_heads / 2`` KV heads (the shape the plugin passes); its tokens equal one chip's here."""
    check_run(*engine_core_runs[mesh_device], reference, mesh=mesh)
    assert not engine_core_runs[mesh_device][0]["worker_imported_here"]  # (also after the run before it)


IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_PLUGINS": "tt_model_registry,tt,tt_models"}
# A Llama wide enough to split over T3K's 8 chips: hidden 256, 8 heads, 8 KV heads.
T3K_LLAMA = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                        num_key_value_heads=8, head_dim=32, vocab_size=320, max_position_embeddings=512)
TRACED_NAMES = ["llama-gqa", "qwen2-bias", "qwen3-qk-norm", "mistral-window", "SmolLM2-135M-Instruct"]
# The mixture-of-experts families' tiny models (tt_models.testing.moe), served in the same traced runs on an N300 (the
# experts split over its two chips, the attention tensor-parallel); GPT-OSS's context is 128 positions (YaRN from 32,
# factor 4), which vLLM derives and would refuse a longer max_model_len for.
MOE_RUNS = {"qwen3-moe": {}, "gpt-oss": {"max_model_len": 128}}
MOE_MESH_DEVICE, MOE_MESH = "N300", (1, 2)
# Sliding-window models, window 32 (a block), whose prompts and outputs pass several windows: the tiny Gemma 3 text
# model (sliding and global layers; untied: tied, a random one's greedy tokens repeat one token) and the tiny Mistral
# with a window (every layer sliding), each with its class.
WINDOW_MODELS = {"gemma3-text": (lambda: tiny_gemma3_text(text={"tie_word_embeddings": False}), Gemma3ForCausalLM),
                 "mistral-window": (lambda: tiny_model("mistral-window"), MistralForCausalLM)}
WINDOW_PROMPTS = [torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(n)).tolist()
                  for n in (5, 40, 100)]
WINDOW_TOKENS = 60


@pytest.fixture(scope="module")
def in_process_runs(model_dir: Path, vllm_cache: Path, tmp_path_factory: pytest.TempPathFactory,
                    request: pytest.FixtureRequest) -> dict[str, Any]:
    """One vLLM process whose engines run in it (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``VLLM_PLUGINS`` listing the
    plugin's and ours), serving in turn: the tiny Llama with ``MESH_DEVICE`` unset and the worker module imported
    before vLLM (so first: before vLLM loads its general plugins), the T3K Llama with ``MESH_DEVICE=T3K``, then the
    traced runs, last the sliding-window models (``WINDOW_MODELS``). ``MESH_DEVICE`` is set or removed before each
    engine: the plugin's worker reads it when it opens the device. The references run meanwhile. Each test's part:
    ``(runs, reports, logs, stderr, references)``."""
    tmp = tmp_path_factory.mktemp("in-process")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(T3K_LLAMA).save_pretrained(tmp / "tp-llama")
    traced: list[dict[str, Any]] = []
    for name in TRACED_NAMES[:-1]:
        tiny_model(name).save_pretrained(tmp / name)
        traced.append({"model": str(tmp / name), "prompts": PROMPTS, "max_tokens": SIZES["max_tokens"]})
    traced.append({"model": str(write_smollm2_checkpoint(tmp)), **SMOLLM2_RUN})  # real weights, default precision
    for name, sizes in MOE_RUNS.items():
        tiny_moe(name).save_pretrained(tmp / name)
        traced.append({"model": str(tmp / name), "prompts": PROMPTS, "max_tokens": SIZES["max_tokens"], **sizes,
                       "env": {"MESH_DEVICE": MOE_MESH_DEVICE}})
    for name, (make, _) in WINDOW_MODELS.items():
        make().save_pretrained(tmp / name)
    parts = {"in_process": [{"model": str(model_dir), "env": {"MESH_DEVICE": None}, "import_worker_first": True,
                             "mesh_devices": list(MESHES)}],
             "t3k": [{"model": str(tmp / "tp-llama"), "env": {"MESH_DEVICE": "T3K"}}],
             "traced": [{"env": {"MESH_DEVICE": None}, **run, "additional_config": DEVICE_PATH,
                         "async_scheduling": True} for run in traced],
             "encoder_decoder_worker": [{**traced[0], "env": {"MESH_DEVICE": None}, "additional_config": DEVICE_PATH,
                                         "async_scheduling": True, "worker_cls": ENCODER_DECODER_WORKER}],
             "sliding_window": [{"model": str(tmp / name), "prompts": WINDOW_PROMPTS, "max_tokens": WINDOW_TOKENS,
                                 "env": {"MESH_DEVICE": None}, "additional_config": DEVICE_PATH,
                                 "async_scheduling": True, "watch_kv": True} for name in WINDOW_MODELS]}
    references: dict[str, list[list[list[int]]]] = {}

    def meanwhile() -> None:
        references["in_process"] = [request.getfixturevalue("reference")]
        references["t3k"] = [_reference(tmp / "tp-llama", PROMPTS, SIZES["max_tokens"], mesh_shape=(1, 8))]
        references["traced"] = [_reference(Path(r["model"]), r["prompts"], r["max_tokens"],
                                           max_model_len=r.get("max_model_len", SIZES["max_model_len"]),
                                           mesh_shape=MOE_MESH if "env" in r else None)
                                for r in traced]
        references["encoder_decoder_worker"] = references["traced"][:1]
        references["sliding_window"] = [_reference(tmp / name, WINDOW_PROMPTS, WINDOW_TOKENS) for name in WINDOW_MODELS]

    runs = [run for part in parts.values() for run in part]
    reports, stdout, stderr = serve(model_dir, tmp, vllm_cache, IN_PROCESS_ENV, timeout=1500, models=runs,
                                    meanwhile=meanwhile)
    logs = run_logs(stdout)
    assert len(reports) == len(logs) == len(runs), stdout[-3000:]
    split, first = {}, 0
    for name, part in parts.items():
        last = first + len(part)
        split[name] = (part, reports[first:last], logs[first:last], stderr, references[name])
        first = last
    return split


def test_t3k_serves_one_tensor_parallel_replica_over_8_chips(in_process_runs: dict[str, Any]) -> None:
    """``MESH_DEVICE=T3K``: the plugin's worker opens a 1x8 host mesh and our class runs one replica
    tensor-parallel over its 8 chips, allocating the KV shape the plugin passes (``kv_heads // 8`` heads per chip);
    greedy tokens equal ``tt_models.LLM(mesh_shape=(1, 8))``'s. A Llama wide enough to split (``T3K_LLAMA``)."""
    _, [report], [log], stderr, [reference] = in_process_runs["t3k"]
    check_run(report, log, stderr, reference, mesh="1x8")
    assert report["chips_per_replica"] == [8]
    assert report["kv_cache_shape"][1] == T3K_LLAMA.num_key_value_heads // 8


def test_in_process_engine(in_process_runs: dict[str, Any]) -> None:
    """The engine in this process, ``VLLM_PLUGINS`` listing the plugin's and ours, ``MESH_DEVICE`` unset, the
    worker module imported before the general plugins run: only open/close are replaced, the device is a 1x1 host
    mesh, the engine's cleanup walks the model's ``modules()`` (at its collection before the next run, and at exit),
    and other ``MESH_DEVICE`` values open the meshes the plugin would."""
    _, [report], [log], stderr, [reference] = in_process_runs["in_process"]
    check_run(report, log, stderr, reference, mesh="1x1", opens=1 + len(MESHES))
    assert report["replaced"] == ["close_mesh_device", "open_mesh_device"]
    assert report["device"] == {"type": HOST_DEVICE, "shape": [1, 1]}
    assert report["mesh_shapes"] == MESHES


DEVICE_PATH = {"tt": {"trace_mode": "all", "sample_on_device_mode": "all"}}
# SmolLM2 (real weights: the slow one on the host backend) with one prompt and a few tokens.
SMOLLM2_RUN = dict(prompts=PROMPTS[:1], max_tokens=4)


def _reference(path: Path, prompts: list[list[int]], max_tokens: int, mesh_shape: tuple[int, int] | None = None,
               max_model_len: int = SIZES["max_model_len"]) -> list[list[int]]:
    llm = LLM(str(path), backend="host", optimizations=None, max_num_seqs=SIZES["max_num_seqs"],
              block_size=SIZES["block_size"], max_model_len=max_model_len, mesh_shape=mesh_shape)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


def test_traced_decode_with_device_sampling(in_process_runs: dict[str, Any]) -> None:
    """``trace_mode: all`` and ``sample_on_device_mode: all``, the tiny Llama, Qwen2, Qwen3 and Mistral classes,
    SmolLM2 and the tiny Qwen3-MoE and GPT-OSS on an N300 (vLLM 0.25.1 accepting their architectures; for GPT-OSS the
    plugin turns chunked prefill and prefix caching off; the experts split over the two chips) served one after another by one in-process engine with vLLM's
    async scheduling (the plugin's async decode): prefill and decode return tokens sampled on the device (greedy:
    the argmax), the traces are captured at warmup, every decode step is a traced ``decode_forward`` (one
    ``execute_trace`` each), steady steps come a step behind (``reset_batch=False``: the model feeds its sampled
    tokens back on the device), and the tokens equal ``tt_models.LLM``'s on the same mesh (synchronous, host sampling
    of eager logits)."""
    runs, reports, _, stderr, references = in_process_runs["traced"]
    assert "Traceback" not in stderr, stderr[-6000:]
    names = TRACED_NAMES + list(MOE_RUNS)
    assert len(reports) == len(runs) == len(names)
    for name, run, report, reference in zip(names, runs, reports, references):
        print(f"{name}: vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
        assert report["tokens"] == reference, name
        assert report["chips_per_replica"] == [MOE_MESH[1] if name in MOE_RUNS else 1], name
        decodes = report["decodes"]
        assert decodes["decode_forward"] >= run["max_tokens"] - 1, decodes
        assert decodes["traced"] == decodes["sampling_params"] == decodes["execute_trace"] == decodes["decode_forward"]
        assert decodes["captured_at_warmup"] == 3 and decodes["captured_while_serving"] == 0, decodes
        assert decodes["reset_batch_false"] > 0, decodes


def test_encoder_decoder_worker_leaves_decoder_only_models_to_the_plugin(in_process_runs: dict[str, Any]) -> None:
    """tt-models' encoder-decoder worker (``--worker-cls``) serving a decoder-only model is the plugin's worker: the
    traced, device-sampled, async run of the tiny Llama gives ``tt_models.LLM``'s tokens, with the plugin's decode
    path as in the run without it."""
    _, [report], [log], stderr, [reference] = in_process_runs["encoder_decoder_worker"]
    _, [plugin_report, *_], _, _, _ = in_process_runs["traced"]
    check_run(report, log, stderr, reference, mesh="1x1")
    assert report["worker"] == "TTEncoderDecoderWorker" and plugin_report["worker"] == "TTWorker"
    assert report["decodes"] == plugin_report["decodes"]


def test_sliding_window_models_under_vllm_hybrid_kv_cache(in_process_runs: dict[str, Any]) -> None:
    """The tiny Gemma 3 text model and the tiny Mistral with a window, prompts and outputs passing five windows, served
    traced, device-sampled and async: vLLM's KV-cache groups are the class's (``get_kv_cache_spec``; Gemma 3's
    sliding and global layers two groups, so the plugin hands the class ``page_tables_per_layer`` in every forward;
    Mistral's one sliding group, ``page_table`` alone); vLLM frees the sliding groups' blocks that fall out of the
    window (a decoding request holds ``ceil((window - 1) / block_size) + 1`` blocks at most there, every block in a
    global group) and hands them out again while the runner's tables still name them where they were (vLLM tells the
    runner of new blocks only); the tokens equal ``tt_models.LLM``'s (``free_out_of_window_blocks`` on); every block
    is free at the end."""
    runs, reports, logs, stderr, references = in_process_runs["sliding_window"]
    bs = SIZES["block_size"]
    for (name, (_, cls)), run, report, log, reference in zip(WINDOW_MODELS.items(), runs, reports, logs, references):
        print(f"{name}: vLLM startup {report['startup_s']} s, generate {report['generate_s']} s")
        check_run(report, log, stderr, reference, mesh="1x1")
        assert all(len(set(tokens)) > 5 for tokens in reference), reference  # tokens that depend on the context
        kv = report["kv_blocks"]
        groups = cls.kv_cache_groups(AutoConfig.from_pretrained(run["model"]))
        assert kv["groups"] == [["FullAttentionSpec" if window is None else "SlidingWindowSpec", window, list(layers)]
                                for layers, window in zip(groups.layers, groups.windows)], name
        hybrid = len(kv["groups"]) > 1
        assert hybrid == (name == "gemma3-text")
        forwards = kv["per_layer_tables"] + kv["one_table"]
        assert forwards >= WINDOW_TOKENS and kv["per_layer_tables"] == (forwards if hybrid else 0), kv
        decoding = [(n, held) for n, prompt, held in kv["held"] if n > prompt]
        assert max(n for n, _ in decoding) == max(map(len, WINDOW_PROMPTS)) + WINDOW_TOKENS - 1
        for n, held in decoding:
            for (_, window, _), blocks in zip(kv["groups"], held):
                if window is None:
                    assert blocks == -(-n // bs), (n, held)
                else:
                    assert 1 <= blocks <= -(-(window - 1) // bs) + 1, (n, held)
        assert kv["named_twice"] > 0, kv
        assert kv["free_after"] == kv["blocks"], kv


def test_decode_as_one_token_prefill_with_device_sampling(model_dir: Path, reference: list[list[int]],
                                                          host_device: Any) -> None:
    """Plugin main delivers each decode step as a one-token prefill (``start_pos > 0``); the vendored commit has no
    switch for it, so this drives the class that way directly, as the plugin's ``submit_prefill`` calls it (with
    device sampling, greedy): the tokens equal ``tt_models.LLM``'s."""
    from transformers import AutoConfig

    from tt_models.models.llama.generator import LlamaForCausalLM

    bs, n = SIZES["block_size"], len(PROMPTS)
    model = LlamaForCausalLM.initialize_vllm_model(AutoConfig.from_pretrained(model_dir), host_device,
                                                   SIZES["max_num_seqs"], max_seq_len=SIZES["max_model_len"])
    n_kv_heads, head_dim = model.models[0].kv_geometry
    kv = model.allocate_kv_cache((32, n_kv_heads, bs, head_dim), None, model.models[0].n_layers)
    width = SIZES["max_model_len"] // bs
    page_table = torch.tensor([[r * width + c for c in range(width)] for r in range(n)], dtype=torch.int32)
    greedy = SimpleNamespace(temperature=[0.0] * n, top_k=[1] * n, top_p=[0.0] * n)
    sequences = [list(p) for p in PROMPTS]
    starts = [0] * n
    for _ in range(SIZES["max_tokens"]):
        length = max(len(s) for s in sequences)
        tokens = model.prefill_forward(
            tokens=torch.tensor([s + [0] * (length - len(s)) for s in sequences], dtype=torch.int32),
            page_table=page_table, kv_cache=kv, prompt_lens=np.array([len(s) for s in sequences]),
            start_pos=np.array(starts, dtype=np.int32), empty_slots=list(range(n)), sampling_params=greedy,
            enable_trace=True)
        starts = [len(s) for s in sequences]
        for s, t in zip(sequences, tokens.tolist()):
            s.append(t)
    assert [s[len(p):] for s, p in zip(sequences, PROMPTS)] == reference
