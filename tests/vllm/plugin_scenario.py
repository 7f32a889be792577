"""The real vllm-tt-plugin serving a tt-models class on the host backend, run in a fresh process by test_plugin_host.py.

Run as a script from outside the checkout with ``TT_MODELS_BACKEND=host`` and ``MESH_DEVICE`` set, like a TT
engineer would: ``python tests/vllm/plugin_scenario.py '<json arguments>'``. Nothing here patches the plugin;
tt-models' general plugin does what it does on its own. Prints one ``RESULT <json>`` line.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

MARKER = "RESULT "
RUN_MARKER = "RUN "  # a line before each of several runs: the test splits this process's output (vLLM's log) at it
WORKER_MODULE = "vllm_tt_plugin.worker"


def replaced_in_worker() -> list[str]:
    """The functions of the plugin's worker module that tt-models replaced (it must be only the device open/close)."""
    worker = sys.modules[WORKER_MODULE]
    return sorted(name for name, value in vars(worker).items()
                  if callable(value) and getattr(value, "__module__", "").startswith("tt_models."))


def mesh_shapes(mesh_devices: list[str]) -> dict[str, list[int]]:
    """The shape of the device the plugin's (replaced) ``open_mesh_device`` opens for each ``MESH_DEVICE``."""
    import os

    worker, shapes = sys.modules[WORKER_MODULE], {}
    for value in mesh_devices:
        os.environ["MESH_DEVICE"] = value
        device = worker.open_mesh_device({}, "all")
        shapes[value] = list(device.shape)
        worker.close_mesh_device(device, {})
    return shapes


def count_decodes(model: Any) -> dict[str, int]:
    """Counts, from here on, the model's ``decode_forward`` calls, how many asked for the trace, how many the plugin's
    async decode sent a step behind (``reset_batch=False``: tokens fed back on the device), and (at report time) its
    ``execute_trace`` calls: instruments our class, not the plugin."""
    counts = {"decode_forward": 0, "traced": 0, "reset_batch_false": 0}
    forward = model.decode_forward

    def decode_forward(**kwargs: Any) -> Any:
        counts["decode_forward"] += 1
        counts["traced"] += bool(kwargs.get("enable_trace"))
        counts["reset_batch_false"] += kwargs.get("reset_batch") is False
        counts["sampling_params"] = counts.get("sampling_params", 0) + (kwargs.get("sampling_params") is not None)
        return forward(**kwargs)

    model.decode_forward = decode_forward
    return counts


def main(model: str, prompts: list[list[int]], max_tokens: int, block_size: int, max_num_seqs: int,
         max_model_len: int, import_worker_first: bool = False, mesh_devices: Sequence[str] = (),
         additional_config: dict[str, Any] | None = None, async_scheduling: bool = False,
         env: dict[str, str | None] | None = None, worker_cls: str = "auto") -> dict[str, Any]:
    """Greedy tokens of ``prompts`` from ``vllm.LLM``; with ``import_worker_first`` the plugin's worker module is
    imported before vLLM loads its general plugins (tt-models then patches it at once instead of on import).
    An in-process engine also reports its device, what was replaced, the shapes of ``mesh_devices`` and the
    model's decode calls (``decode_forward``, traced ones, ``execute_trace``). ``async_scheduling``: vLLM's, which
    turns on the plugin's async decode. ``env``: variables set (None: removed) before the engine starts, e.g. the
    ``MESH_DEVICE`` the plugin's worker reads when it opens the device. ``worker_cls``: vLLM's ``--worker-cls``
    (``auto``: the platform's, the plugin's worker)."""
    import os

    for name, value in (env or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if import_worker_first:
        import importlib

        importlib.import_module(WORKER_MODULE)
    from vllm import LLM, SamplingParams

    start = time.monotonic()
    llm = LLM(model=model, block_size=block_size, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
              skip_tokenizer_init=True, additional_config=additional_config or {}, async_scheduling=async_scheduling,
              worker_cls=worker_cls)
    started = time.monotonic()
    executor = getattr(llm.llm_engine, "model_executor", None)  # only for an in-process engine core
    generator = executor.driver_worker.worker.model_runner.model if executor is not None else None
    counts = count_decodes(generator) if generator is not None else None
    executions = generator.traces.executions if generator is not None else 0
    captured = len(generator.traces.captures) if generator is not None else 0
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    report: dict[str, Any] = {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                              "startup_s": round(started - start, 1),
                              "generate_s": round(time.monotonic() - started, 1)}
    if executor is not None:
        report["decodes"] = {**counts, "execute_trace": generator.traces.executions - executions,
                             "captured_at_warmup": captured,
                             "captured_while_serving": len(generator.traces.captures) - captured}
        worker = executor.driver_worker.worker
        device = worker.mesh_device
        report["device"] = {"type": f"{type(device).__module__}.{type(device).__name__}",
                            "shape": list(device.shape)}
        report["kv_cache_shape"] = list(worker.model_runner.kv_caches[0][0][0].shape)  # one chip's, layer 0's K
        report["worker"] = type(worker).__qualname__
        report["chips_per_replica"] = [d.get_num_devices() for d in generator.devices]
        report["replaced"] = replaced_in_worker()
        report["mesh_shapes"] = mesh_shapes(list(mesh_devices))
    else:
        # Not imported here, so each engine core (forked from this process) imports it and the hook patches it.
        report["worker_imported_here"] = WORKER_MODULE in sys.modules
        llm.llm_engine.engine_core.shutdown()  # its process ends here (its log before the next run's)
    return report


def run(arguments: dict[str, Any]) -> Any:
    """One model (``model``), or several served one after another in this process (``models``: a report each; an
    entry is a path, or a dict of a ``model`` path and the arguments it overrides, e.g. fewer prompts or tokens, its
    ``env`` or ``additional_config``; a ``RUN_MARKER`` line before each)."""
    models = arguments.pop("models", None)
    if models is None:
        return main(**arguments)
    reports = []
    for i, model in enumerate(models):
        print(f"{RUN_MARKER}{i}", flush=True)
        reports.append(main(**(arguments | (model if isinstance(model, dict) else {"model": model}))))
        gc.collect()  # the previous engine and its generator go before the next one starts
    return reports


if __name__ == "__main__":
    print(MARKER + json.dumps(run(json.loads(sys.argv[1]))), flush=True)
